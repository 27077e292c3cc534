"""Sequence lengths other than the traced one: Hugging Face text models of the zoo, traced (or
compiled) once at their zoo length and then called at other lengths, as a server of variable
length requests calls them. Each peer is built once; at each length it is called twice before
the timed rounds (torch_graphfuse fuses again, for that length, the groups whose sizes the
traced length fixed; inductor compiles again). Correctness against eager at each length, and
latency with the peers side by side in one process per model (a fused module's compiled
partitions and weights stay after the module is deleted and collected, as TorchScript keeps a
traced module's code: a model run before would count against the next one's weight budget).
Writes RESULTS_lengths.md and lengths.png.

    python benchmarks/lengths.py [--models hf/bert,hf/t5] [--lengths 32,64,100,200]
                                 [--rounds N] [--small] [--out benchmarks]

--small runs the zoo's small configurations (the test slice's), for a quick look.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import subprocess
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path

import torch
from harness import plots
from harness.calls import Forward, Inputs
from harness.children import json_child
from harness.cli import comma_list, zoo_models
from harness.cpu.peers import PEERS_BY_KEY, Built, Peer, fusers, inductor_forward
from harness.cpu.report import machine
from harness.cpu.tables import geomean
from harness.cpu.timing import StallProbe, Timing, timed_rounds
from harness.text import failure, progress, ratio, table, utc_now

import torch_graphfuse
from torch_graphfuse.testing import runner, zoo

TEXT_MODELS = ("hf/bert", "hf/gpt2", "hf/t5", "hf/llama")
PEER_KEYS = ("eager", "script", "onednn", "inductor", "graphfuse")
OVER = ("script", "onednn", "inductor")


@dataclasses.dataclass
class LengthRun:
    model: str
    traced: int
    length: int
    error: float  # torch_graphfuse's, relative to eager's largest magnitude
    results: dict[str, float | str]  # median ms, or why the peer failed
    respecialized: int  # calls of groups fused again for this length, in the timed rounds
    fallbacks: int  # unfused calls of groups, in the timed rounds

    def speedup(self, over: str) -> float | None:
        base, ours = self.results.get(over), self.results.get("graphfuse")
        return None if isinstance(base, str) or isinstance(ours, str) or base is None \
            or ours is None else base / ours


def _built(peer: Peer, model: torch.nn.Module, inputs: Inputs) -> Forward:
    """The peer's forward, built at the traced inputs."""
    with torch.no_grad(), fusers(peer.onednn, peer.graphfuse):
        if peer.key == "eager":
            return model
        if peer.key == "inductor":
            return inductor_forward(model, inputs)
        return runner.profiled(model, inputs)


def at_length(inputs: Inputs, length: int) -> Inputs:
    """The token ids and mask cut to `length`, or repeated up to it."""
    repeats = -(-length // inputs[0].shape[1])
    return [torch.cat([t] * repeats, dim=1)[:, :length].contiguous() for t in inputs]


def run_model(name: str, lengths: Sequence[int], small: bool, timing: Timing,
              probe: StallProbe) -> list[LengthRun]:
    model, inputs = zoo.build(name, small)
    traced = inputs[0].shape[1]
    peers = [PEERS_BY_KEY[k] for k in PEER_KEYS]
    forwards: dict[str, Forward | str] = {}
    for peer in peers:
        try:
            forwards[peer.key] = _built(peer, model, inputs)
        except Exception as error:  # reported in the peer's cells, never ends the run
            forwards[peer.key] = failure(error)
            progress(f"  {name} | {peer.label}: failed: {forwards[peer.key]}")
    runs = []
    for length in lengths:
        call_inputs = at_length(inputs, length)
        with torch.no_grad():
            reference = model(*call_inputs)
        built, results = [], {}
        error = float("nan")
        for peer in peers:
            forward = forwards[peer.key]
            if isinstance(forward, str):
                results[peer.key] = forward
                continue
            try:
                with torch.no_grad(), fusers(peer.onednn, peer.graphfuse):
                    for _ in range(2):
                        out = forward(*call_inputs)
            except Exception as error_:  # reported in the peer's cell
                results[peer.key] = failure(error_)
                continue
            if peer.key == "graphfuse":
                error = zoo.relative_error(out, reference)
            built.append(Built(peer, functools.partial(forward, *call_inputs), 0.0, None))
        torch_graphfuse.reset_kernel_stats()
        times, rounds, _ = timed_rounds(built, torch.float32, timing, probe)
        stats = torch_graphfuse.kernel_stats()
        results.update(times)
        run = LengthRun(name, traced, length, error,
                        {k: results[k] for k in PEER_KEYS}, stats["respecialized_runs"],
                        stats["fallbacks"])
        runs.append(run)
        progress(f"  {name} at {length}: " + ", ".join(
            f"{k} {v if isinstance(v, str) else f'{v:.2f}'}" for k, v in run.results.items())
            + f" ({rounds} rounds; error {error:.1e})")
    return runs


def child(name: str, lengths: Sequence[int], small: bool, rounds: int, path: Path) -> None:
    """The process of one model: its runs, written to `path`."""
    runs = run_model(name, lengths, small, Timing(1, rounds, 20.0), StallProbe())
    path.write_text(json.dumps([dataclasses.asdict(r) for r in runs]))


def run_in_child(name: str, argv: Sequence[str]) -> list[LengthRun] | str:
    """One model in a process of its own: its runs, or why it failed."""
    try:
        data = json_child(lambda path: [sys.executable, __file__, *argv, "--child",
                                        f"{name} {path}"])
    except subprocess.CalledProcessError as error:
        return f"its process failed (exit {error.returncode})"
    return [LengthRun(**r) for r in data]


def _cell(value: float | str) -> str:
    return f"{value:.2f}" if isinstance(value, float) else "failed"


def report(runs: Sequence[LengthRun], failures: Sequence[str], command: str) -> str:
    labels = {k: PEERS_BY_KEY[k].label for k in PEER_KEYS}
    lines = ["# Sequence lengths other than the traced one", "",
             f"Machine: {machine()}, torch {torch.__version__}  ",
             f"Date: {utc_now()}  ", f"Command: `{command}`", "",
             "Each model is traced (or compiled) once at its zoo length, then called at each "
             "length: twice before the timed rounds, then in rounds that call every peer once. "
             "Median ms. Error: torch_graphfuse against eager at that length, relative to "
             f"eager's largest magnitude (at most {zoo.FP32_TOLERANCE:g}). Fused again: calls "
             "of groups whose sizes the traced length fixed, run by their subgraph fused again "
             "for this length; unfused: calls of groups that ran unfused (both in the timed "
             "rounds). Speedups are torch_graphfuse's.", ""]
    header = ["model", "traced", "length", "error", *[f"{labels[k]} ms" for k in PEER_KEYS],
              *[f"vs {labels[k]}" for k in OVER], "fused again", "unfused"]
    rows = [[r.model, str(r.traced), str(r.length), f"{r.error:.1e}",
             *[_cell(r.results[k]) for k in PEER_KEYS],
             *[ratio(r.speedup(k), "n/a") for k in OVER], str(r.respecialized),
             str(r.fallbacks)] for r in runs]
    lines += table(header, rows)
    lines += ["", "Geomean speedup of torch_graphfuse over the lengths other than the traced "
              "one:", ""]
    other = [r for r in runs if r.length != r.traced]
    for key in OVER:
        values = [s for r in other for s in [r.speedup(key)] if s is not None]
        mean = ratio(geomean(values) if values else None, "n/a")
        lines.append(f"- over {labels[key]}: {mean} ({len(values)} model lengths)")
    wrong = [f"{r.model} at {r.length}" for r in runs if not r.error <= zoo.FP32_TOLERANCE]
    lines += ["", f"Results off eager: {', '.join(wrong) if wrong else 'none'}.", ""]
    if failures:
        lines += ["Models that did not run:", "", *[f"- {f}" for f in failures], ""]
    return "\n".join(lines)


def plot(runs: Sequence[LengthRun], path: Path) -> None:
    plt = plots.pyplot()
    fig, ax = plt.subplots(figsize=(max(8.0, 0.45 * len(runs) + 2), 4.5))
    plots.bars(ax, [(f"over {PEERS_BY_KEY[k].label}", [r.speedup(k) or 0.0 for r in runs])
                    for k in ("script", "onednn")])
    plots.x_labels(ax, [f"{r.model} {r.length}" + (" (traced)" if r.length == r.traced else "")
                        for r in runs], rotation=60, fontsize=7)
    ax.set_ylabel("torch_graphfuse speedup")
    ax.legend(fontsize=8)
    fig.suptitle(f"other sequence lengths, batch 1: {machine()}", fontsize=10)
    plots.save(fig, path)


def main(argv: Sequence[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default=",".join(TEXT_MODELS), help="zoo names")
    parser.add_argument("--lengths", default="32,64,100,128,200", help="token counts")
    parser.add_argument("--rounds", type=int, default=7, help="measured rounds per length")
    parser.add_argument("--small", action="store_true", help="the small configurations")
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent)
    parser.add_argument("--child", help=argparse.SUPPRESS)  # "<model> <json path>"
    args = parser.parse_args(argv)
    names = zoo_models(args.models)
    warnings.filterwarnings("ignore")  # the libraries' deprecation notices, per model
    lengths = [int(n) for n in comma_list(args.lengths)]
    if args.child:
        name, path = args.child.split(" ")
        child(name, lengths, args.small, args.rounds, Path(path))
        return
    command = " ".join(["python", "benchmarks/lengths.py", *argv])
    runs: list[LengthRun] = []
    failures: list[str] = []
    args.out.mkdir(parents=True, exist_ok=True)
    for i, name in enumerate(names, 1):
        progress(f"[{i}/{len(names)}] {name}")
        done = run_in_child(name, argv)
        if isinstance(done, str):  # a model that cannot run is reported, not fatal
            failures.append(f"{name}: {done}")
            progress(f"  failed: {failures[-1]}")
            continue
        runs += done
        # After every model, so that an interrupted run leaves what it measured.
        (args.out / "RESULTS_lengths.md").write_text(report(runs, failures, command))
        if runs:
            plot(runs, args.out / "lengths.png")
    progress(f"wrote {args.out / 'RESULTS_lengths.md'} and {args.out / 'lengths.png'}")


if __name__ == "__main__":
    main(sys.argv[1:])
