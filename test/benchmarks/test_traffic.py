"""benchmarks/traffic.py on tiny streams of the zoo's small configurations: its core in this
process (every peer but inductor, whose compiles take minutes here; each peer alone, then all
of them request by request), and the script with its child processes once. Rows and files
are checked, never times."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from benchmark_modules import BENCHMARKS, load

from torch_graphfuse.testing import zoo

pytestmark = pytest.mark.skipif(zoo.missing() is not None, reason=str(zoo.missing()))

MODELS = ("hf/bert", "hf/vit")  # a text stream (token counts vary), an image one (batch sizes)
PEERS = ("eager", "script", "onednn", "graphfuse")


def test_streams_and_callers_make_their_rows(tmp_path: Path) -> None:
    traffic = load("traffic")
    labels = {k: traffic.PEERS_BY_KEY[k].label for k in PEERS}
    results = {(name, key): traffic.run_stream(name, key, small=True, requests=3, seed=0)
               for name in MODELS for key in PEERS}
    interleaved = {name: traffic.run_interleaved(name, PEERS, small=True, requests=3, seed=0)
                   for name in MODELS}
    callers = traffic.run_callers([1, 2], seconds=0.3, small=True)
    text = traffic.report(results, interleaved, callers, 3, 0, 0.3, "test")

    for name in MODELS:
        sizes = {tuple(results[name, key].sizes) for key in PEERS}
        assert len(sizes) == 1 and len(next(iter(sizes))) == 3  # one stream for every peer
        for key in PEERS:
            assert f"| {name} | {labels[key]} |" in text
    assert "compiles" in results["hf/bert", "graphfuse"].stats
    assert results["hf/bert", "eager"].error is None
    assert "Results off eager (over 0.0001): none." in text
    for peer in ("TorchScript (frozen)", "torch_graphfuse"):
        for row in ("| 1 | 1 |", "| 2 | 1 |", "| 1 | 2 (reference) |"):
            assert f"| {peer} {row}" in text
    assert all(r.requests > 0 for r in callers)
    for name in MODELS:  # the same requests, every peer in one process
        assert set(interleaved[name].ms) == set(PEERS)
        assert interleaved[name].sizes == results[name, "script"].sizes
        assert all(len(ms) == 3 for ms in interleaved[name].ms.values())
    assert "the peers in one process" in text
    assert "of TorchScript (frozen)'s whole-stream time in one process (2 streams)" in text
    assert "failed" not in text
    traffic.plot(results, interleaved, callers, tmp_path / "traffic.png")
    assert (tmp_path / "traffic.png").stat().st_size > 0


def test_script_writes_results(tmp_path: Path) -> None:
    subprocess.run([sys.executable, str(BENCHMARKS / "traffic.py"), "--small", "--models",
                    "hf/bert", "--peers", "graphfuse", "--requests", "2", "--callers", "",
                    "--out", str(tmp_path)], check=True, capture_output=True, text=True,
                   timeout=300)
    results = (tmp_path / "RESULTS_traffic.md").read_text()
    assert "| hf/bert | torch_graphfuse |" in results and "failed" not in results
    assert "Concurrent callers" not in results
    assert (tmp_path / "traffic.png").stat().st_size > 0
