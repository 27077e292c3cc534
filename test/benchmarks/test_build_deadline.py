"""A peer whose build runs past the benchmark's build limit costs the table that peer's cell
(`stopped`), not the model's row: the other peers are still built and timed."""

from __future__ import annotations

import time

import pytest
import torch
from benchmark_modules import load

calls = load("harness.calls")
compare = load("harness.cpu.compare")
deadline = load("harness.deadline")
peers = load("harness.cpu.peers")
timing = load("harness.cpu.timing")
zoo_runs = load("harness.cpu.zoo_runs")


def test_deadline_interrupts_a_block_past_its_limit() -> None:
    start = time.perf_counter()
    with pytest.raises(deadline.Overrun, match="ran past 0.2 s"), deadline.deadline(0.2):
        while True:
            pass
    assert time.perf_counter() - start < 5


def test_deadline_lets_a_block_within_its_limit_finish() -> None:
    with deadline.deadline(5.0):
        total = sum(range(1000))
    assert total == 499500
    with deadline.deadline(None):
        pass


def _sleeping_build(model: torch.nn.Module, inputs: tuple[torch.Tensor, ...]) -> None:
    time.sleep(60)


def _rewrapping_build(model: torch.nn.Module, inputs: tuple[torch.Tensor, ...]) -> None:
    """As inductor does: what interrupts the compile comes out as the compiler's own error."""
    try:
        time.sleep(60)
    except deadline.Overrun as error:
        raise RuntimeError("the compile failed") from error


def _failing_build(model: torch.nn.Module, inputs: tuple[torch.Tensor, ...]) -> None:
    raise RuntimeError("unsupported model")


def test_a_peer_whose_build_passes_the_limit_is_stopped_and_the_others_timed() -> None:
    model = torch.nn.Linear(8, 8).eval()
    chosen = (peers.Peer("eager", "eager", calls.eager, first_calls=0),
              peers.Peer("slow", "a slow compiler", _sleeping_build),
              peers.Peer("rewrapping", "a compiler that rewraps", _rewrapping_build),
              peers.Peer("failing", "a failing compiler", _failing_build))
    start = time.perf_counter()
    result = compare.compare(model, (torch.randn(2, 8),), torch.float32, chosen,
                             timing.Timing(1, 3, 5.0), timing.StallProbe(), "linear",
                             build_seconds=0.5)
    assert time.perf_counter() - start < 30
    assert isinstance(result.results["eager"], compare.Measurement)
    for key in ("slow", "rewrapping"):
        assert result.results[key].startswith(compare.STOPPED), result.results[key]
        assert zoo_runs._cell(result.results[key]) == "stopped"
    assert "unsupported model" in result.results["failing"]
    assert zoo_runs._cell(result.results["failing"]) == "failed"
    assert zoo_runs._cell(result.results["eager"]) == f"{result.results['eager'].ms:.2f}"


def test_the_zoo_table_shows_and_lists_a_stopped_peer() -> None:
    results = {p.key: compare.Measurement(10.0, 0.0) for p in peers.PEERS}
    results["inductor"] = f"{compare.STOPPED} (ran past 300 s)"
    run = zoo_runs.ZooRun("hf/swin", "vision transformer (windowed)", "fp32", 1e-6, None,
                          10, 12, 2, [], results)
    text = zoo_runs.section([run], [], "python benchmarks/zoo.py", small=False)
    row = next(line for line in text.splitlines() if line.startswith("| hf/swin "))
    assert "| stopped |" in row and "failed" not in row
    assert "- hf/swin fp32, torch.compile (inductor): build stopped (ran past 300 s)" in text
    assert "Models that did not run" not in text
