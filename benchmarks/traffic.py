"""Serving traffic: streams of requests whose sizes change from call to call, as a server
meets them, replayed through each peer of a model traced (or compiled) once at the zoo's input.
Text models (BERT, GPT-2, T5) get requests of batch 1 with token counts drawn from 16 to 512;
image models (ResNet-50, ViT) get batches of 1 to 32 images. Every stream has a fixed seed, so
each peer sees the same requests.

Each (model, peer) runs in a process of its own: the model is built, the peer traced and
frozen at the zoo's input (torch.compile: compiled with dynamic shapes, at its first call on
that input), and the whole stream is replayed, its first calls (the profiling runs, where the
fusers compile) included. Per stream: the build, the whole stream's time, the steady state
(the last third of the requests), p50 and p99 latency, p99 after the first 20 requests, the
process's RSS before the stream and its peak, the error against eager on every 10th request,
and torch_graphfuse's kernel_stats() after the stream.

Processes of one kind drift apart by 20-40% in speed on a shared VM, so the whole streams'
times are also measured with every peer in one process: each peer built as above, then each
request handed to every peer in turn (the order rotating from request to request), so that
the machine's drift reaches them alike. Speed claims come from that section; memory from the
processes of their own.

A second section shares one module (frozen TorchScript, torch_graphfuse) between N Python
threads, each with one intra-op thread, calling it on one input (the zoo's BERT) for a fixed
time: requests per second per number of callers, beside one caller with two intra-op threads.

Writes RESULTS_traffic.md and traffic.png.

    python benchmarks/traffic.py [--models hf/bert,timm/resnet50] [--requests N] [--seed S]
                                 [--peers eager,script,...] [--callers 1,2,4] [--seconds S]
                                 [--small] [--out benchmarks] [--limit SECONDS]

--small runs the zoo's small configurations (the test slice's), for a quick look. --callers ''
leaves the concurrency section out.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import gc
import json
import math
import os
import random
import resource
import statistics
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from harness import plots
from harness.calls import Forward, Inputs
from harness.children import json_child_or_why
from harness.cli import comma_list, command_line, zoo_models
from harness.cpu.peers import PEERS_BY_KEY, Peer, fusers, inductor_forward
from harness.cpu.report import machine
from harness.cpu.tables import geomean
from harness.cpu.timing import ms_since
from harness.text import failed_cell, failure, progress, ratio, table, utc_now

import torch_graphfuse
from torch_graphfuse.testing import runner, zoo

PEER_KEYS = ("eager", "script", "onednn", "inductor", "graphfuse")
BASE = "script"  # the peer the ratios are over
CHECK_EVERY = 10  # requests compared with eager: the 1st, the 11th, ...
WARM_AFTER = 20  # the tail latency after the first requests
CALLERS_MODEL = "hf/bert"
CALLER_PEERS = ("script", "graphfuse")
REFERENCE_THREADS = 2  # the reference row: one caller with this many intra-op threads


@dataclasses.dataclass(frozen=True)
class Stream:
    model: str
    varies: str  # "tokens": batch 1, token counts drawn; "batch": images, batch sizes drawn
    low: int
    high: int
    requests: int  # by default

    def draws(self, requests: int, seed: int) -> list[tuple[int, int]]:
        """Each request's size and the seed of its inputs: the same in every process."""
        draw = random.Random(f"{self.model}/{seed}")
        return [(draw.randint(self.low, self.high), draw.getrandbits(62))
                for _ in range(requests)]

    def sizes(self) -> str:
        return f"batch 1, {self.low}-{self.high} tokens" if self.varies == "tokens" \
            else f"batch {self.low}-{self.high}"


STREAMS = {s.model: s for s in (
    Stream("hf/bert", "tokens", 16, 512, 120),
    Stream("hf/gpt2", "tokens", 16, 512, 120),
    Stream("hf/t5", "tokens", 16, 512, 120),  # the encoder reads them, the decoder half as many
    Stream("timm/resnet50", "batch", 1, 32, 48),
    Stream("hf/vit", "batch", 1, 32, 48),
)}

Requests = Callable[[int, int], Inputs]  # a request's inputs from its size and seed


def requests_for(stream: Stream, model: torch.nn.Module, example: Inputs) -> Requests:
    """A stream's request inputs, shaped as the zoo's example. Images: `size` of them. Text:
    random token ids of length `size` and a mask of ones (one sequence needs no padding); an
    encoder-decoder's decoder reads the same share of the ids as in the example."""
    if stream.varies == "batch":
        shapes = [t.shape[1:] for t in example]

        def images(size: int, seed: int) -> Inputs:
            generator = torch.Generator().manual_seed(seed)
            return [torch.randn((size, *shape), generator=generator) for shape in shapes]
        return images

    assert isinstance(model, zoo.Keywords), f"{stream.model}: not a Hugging Face text model"
    names, vocab = model.names, model.model.config.vocab_size
    lengths, traced = [t.shape[1] for t in example], example[0].shape[1]

    def tokens(size: int, seed: int) -> Inputs:
        ids = torch.randint(0, vocab, (1, size), generator=torch.Generator().manual_seed(seed))
        return [torch.ones(1, size, dtype=torch.long) if name == "attention_mask"
                else ids[:, :max(1, size * length // traced)].clone()
                for name, length in zip(names, lengths, strict=True)]
    return tokens


def rss_mb() -> float:
    """This process's resident memory now."""
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def peak_rss_mb() -> float:
    """This process's peak resident memory so far (Linux gives ru_maxrss in KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def percentile(values: Sequence[float], q: float) -> float:
    """The nearest-rank percentile: the smallest value that q percent of them do not exceed."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def worst(errors: Sequence[float]) -> float:
    """The largest error, NaN (outputs that differ in where they are NaN) before any."""
    return max(errors, key=lambda e: math.inf if math.isnan(e) else e)


@dataclasses.dataclass
class StreamRun:
    model: str
    peer: str
    sizes: list[int]
    build_s: float  # trace + freeze; torch.compile: its first call, on the zoo's input
    ms: list[float]  # each request's latency, in the stream's order
    rss_before_mb: float  # after the build, before the first request
    peak_rss_mb: float  # the process's peak at the end of the stream: build and stream
    error: float | None  # worst over the checked requests, relative to eager's largest magnitude
    stats: dict[str, int]  # torch_graphfuse.kernel_stats() after the stream (its peer only)

    @property
    def stream_s(self) -> float:
        return sum(self.ms) / 1e3

    @property
    def steady_ms(self) -> float:
        """Mean latency over the last third of the requests."""
        return statistics.mean(self.ms[-max(1, len(self.ms) // 3):])

    @property
    def warm_p99_ms(self) -> float | None:
        return percentile(self.ms[WARM_AFTER:], 99) if len(self.ms) > WARM_AFTER else None


def build_peer(peer: Peer, model: torch.nn.Module, example: Inputs) -> Forward:
    """The peer built at the example inputs, with no call yet for the TorchScript peers:
    their profiling runs (where the fusers compile) are the stream's first requests."""
    with torch.no_grad(), fusers(peer.onednn, peer.graphfuse):
        if peer.key == "eager":
            return model
        if peer.key == "inductor":
            # What torch.compile(dynamic=True) sets around each of its calls; this process
            # compiles nothing else.
            torch._dynamo.config.assume_static_by_default = False
            return inductor_forward(model, example)
        return runner.freeze(model, example)


def run_stream(name: str, key: str, small: bool, requests: int | None, seed: int) -> StreamRun:
    """One peer fed one model's stream, in this process (a child of its own)."""
    stream, peer = STREAMS[name], PEERS_BY_KEY[key]
    model, example = zoo.build(name, small)
    request = requests_for(stream, model, example)
    draws = stream.draws(requests or stream.requests, seed)
    start = time.perf_counter()
    forward = build_peer(peer, model, example)
    build_s = time.perf_counter() - start
    del model  # the peers other than eager hold their own weights: only they count
    gc.collect()
    checked = [i for i in range(len(draws)) if key != "eager" and i % CHECK_EVERY == 0]
    with tempfile.TemporaryDirectory() as tmp:
        torch_graphfuse.reset_kernel_stats()
        rss_before, ms = rss_mb(), []
        with torch.no_grad(), fusers(peer.onednn, peer.graphfuse):
            for i, (size, input_seed) in enumerate(draws):
                inputs = request(size, input_seed)
                start = time.perf_counter()
                try:
                    out = forward(*inputs)
                except Exception as error:
                    raise RuntimeError(f"request {i + 1} (size {size}): {failure(error)}") \
                        from error
                ms.append(ms_since(start))
                if i in checked:  # on disk until the peak is read: kept, it would raise it
                    torch.save(out, Path(tmp) / f"{i}.pt")
                del inputs, out
        peak = peak_rss_mb()
        stats = torch_graphfuse.kernel_stats() if peer.graphfuse else {}
        del forward
        errors = []
        if checked:
            reference, _ = zoo.build(name, small)
            with torch.no_grad():
                for i in checked:
                    expected = reference(*request(*draws[i]))
                    errors.append(zoo.relative_error(torch.load(Path(tmp) / f"{i}.pt"), expected))
    return StreamRun(name, key, [size for size, _ in draws], build_s, ms, rss_before, peak,
                     worst(errors) if errors else None, stats)


@dataclasses.dataclass
class InterleavedRun:
    model: str
    sizes: list[int]
    ms: dict[str, list[float]]  # peer -> each request's latency, in the stream's order


def run_interleaved(name: str, keys: Sequence[str], small: bool, requests: int | None,
                    seed: int) -> InterleavedRun:
    """Every peer fed one model's stream in this process, request by request: request i goes
    to the peers in an order rotated by i, so none always runs first (after another peer's
    call, on its freed memory) or last."""
    stream = STREAMS[name]
    model, example = zoo.build(name, small)
    request = requests_for(stream, model, example)
    draws = stream.draws(requests or stream.requests, seed)
    peers = [PEERS_BY_KEY[key] for key in keys]
    forwards = [build_peer(peer, model, example) for peer in peers]
    ms: dict[str, list[float]] = {key: [] for key in keys}
    with torch.no_grad():
        for i, (size, input_seed) in enumerate(draws):
            inputs = request(size, input_seed)
            for j in range(len(peers)):
                k = (i + j) % len(peers)
                with fusers(peers[k].onednn, peers[k].graphfuse):
                    start = time.perf_counter()
                    try:
                        forwards[k](*inputs)
                    except Exception as error:
                        raise RuntimeError(f"{peers[k].label}, request {i + 1} (size {size}): "
                                           f"{failure(error)}") from error
                    ms[keys[k]].append(ms_since(start))
    return InterleavedRun(name, [size for size, _ in draws], ms)


@dataclasses.dataclass
class CallerRun:
    peer: str
    callers: int
    threads: int  # intra-op threads of each caller
    requests: int
    seconds: float
    mean_ms: float
    p99_ms: float

    @property
    def per_second(self) -> float:
        return self.requests / self.seconds


def _caller(forward: Forward, inputs: Inputs, threads: int, start: threading.Barrier,
            window: list[float], ms: list[float]) -> None:
    """One caller: its intra-op threads (the setting is each thread's own), a first call,
    then calls until the window's end."""
    torch.set_num_threads(threads)
    try:
        with torch.no_grad():
            forward(*inputs)
            start.wait()
            while (begin := time.perf_counter()) < window[0]:
                forward(*inputs)
                ms.append(ms_since(begin))
    except BaseException:
        start.abort()  # the other callers and `serve` stop waiting: the run fails
        raise


def serve(forward: Forward, inputs: Inputs, callers: int, threads: int,
          seconds: float) -> tuple[int, float, list[float]]:
    """`callers` threads calling `forward` for `seconds`: the requests that completed, the
    time until the last one did, and their latencies."""
    window: list[float] = []
    start = threading.Barrier(callers + 1,
                              action=lambda: window.append(time.perf_counter() + seconds))
    ms: list[list[float]] = [[] for _ in range(callers)]
    workers = [threading.Thread(target=_caller, args=(forward, inputs, threads, start, window,
                                                      ms[i])) for i in range(callers)]
    for worker in workers:
        worker.start()
    start.wait()
    began = window[0] - seconds
    for worker in workers:
        worker.join()
    elapsed = time.perf_counter() - began
    every = [m for caller in ms for m in caller]
    return len(every), elapsed, every


def run_callers(callers: Sequence[int], seconds: float, small: bool) -> list[CallerRun]:
    """The concurrency section, in this process: per number of callers, each peer's module
    shared by that many threads, the peers one after the other."""
    model, example = zoo.build(CALLERS_MODEL, small)
    modules = {}
    for key in CALLER_PEERS:
        peer = PEERS_BY_KEY[key]
        with torch.no_grad(), fusers(peer.onednn, peer.graphfuse):
            modules[key] = runner.profiled(model, example)
    runs = []
    previous = torch.get_num_threads()  # each caller sets its own; MKL's count is global
    try:
        for count, threads in [(n, 1) for n in callers] + [(1, REFERENCE_THREADS)]:
            for key in CALLER_PEERS:
                peer = PEERS_BY_KEY[key]
                with fusers(peer.onednn, peer.graphfuse):
                    done, elapsed, ms = serve(modules[key], example, count, threads, seconds)
                runs.append(CallerRun(key, count, threads, done, elapsed,
                                      statistics.mean(ms) if ms else math.nan,
                                      percentile(ms, 99) if ms else math.nan))
                progress(f"  {peer.label}, {count} caller(s) x {threads} thread(s): "
                         f"{runs[-1].per_second:.1f} requests/s")
    finally:
        torch.set_num_threads(previous)
    return runs


def child(what: str, args: argparse.Namespace) -> None:
    """A child's work (`stream <model> <peer> <json path>`, `interleaved <model> <json path>`
    or `callers <json path>`), its result written to the path: the run, or why it failed."""
    kind, *rest = what.split(" ")
    path = Path(rest[-1])
    try:
        if kind == "stream":
            result: Any = dataclasses.asdict(run_stream(rest[0], rest[1], args.small,
                                                        args.requests, args.seed))
        elif kind == "interleaved":
            result = dataclasses.asdict(run_interleaved(
                rest[0], comma_list(args.peers), args.small, args.requests, args.seed))
        else:
            result = [dataclasses.asdict(r) for r in run_callers(
                [int(n) for n in comma_list(args.callers)], args.seconds, args.small)]
    except Exception as error:  # reported by the parent in the run's cells
        result = {"failure": failure(error)}
    path.write_text(json.dumps(result))


def in_child(what: str, argv: Sequence[str], limit: float) -> Any:
    """A child's result (see `child`), or why it gave none."""
    return json_child_or_why(lambda path: [sys.executable, __file__, *argv, "--child",
                                           f"{what} {path}"], limit)


Results = dict[tuple[str, str], StreamRun | str]  # (model, peer): the run, or why it failed


def _vs_base(results: Results, model: str, value: Callable[[StreamRun], float],
             run: StreamRun) -> float | None:
    """The base peer's value over this run's: above 1 where the run was faster."""
    base = results.get((model, BASE))
    return value(base) / value(run) if isinstance(base, StreamRun) else None


def _ms(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1f}"


def stream_rows(results: Results) -> list[list[str]]:
    rows = []
    for (model, key), run in results.items():
        label = PEERS_BY_KEY[key].label
        if isinstance(run, str):
            rows.append([model, label, failed_cell(run), *[""] * 11])
            continue
        rows.append([
            model, label, f"{run.build_s:.2f}", _ms(run.ms[0]), f"{run.stream_s:.2f}",
            ratio(_vs_base(results, model, lambda r: r.stream_s, run)), _ms(run.steady_ms),
            ratio(_vs_base(results, model, lambda r: r.steady_ms, run)),
            _ms(percentile(run.ms, 50)), _ms(percentile(run.ms, 99)), _ms(run.warm_p99_ms),
            f"{run.rss_before_mb:.0f}", f"{run.peak_rss_mb:.0f}",
            "-" if run.error is None else f"{run.error:.1e}"])
    return rows


def stream_lines(results: Results, requests: int | None, seed: int) -> list[str]:
    runs = [r for r in results.values() if isinstance(r, StreamRun)]
    models = list(dict.fromkeys(model for model, _ in results))
    base = PEERS_BY_KEY[BASE].label
    lines = ["## Request streams", "",
             "Each (model, peer) in a process of its own: the model built, the peer traced and "
             "frozen at the zoo's input (build s; torch.compile with dynamic=True: its first "
             "call, on that input, where it compiles), then the stream replayed. Stream s: the "
             "sum of the requests' latencies, the first ones (the profiling runs, where the "
             "fusers compile) included; first ms: the first request's. Steady ms: the mean over "
             "the last third of the requests. p99 after 20: over the requests after the first "
             f"{WARM_AFTER}. vs {base}: its time over the peer's (above 1x: faster). RSS: the "
             "process's resident memory before the first request, and its peak (ru_maxrss: the "
             "build's included) at the end of the stream. Error: the worst over every "
             f"{CHECK_EVERY}th request (from the first) of the peer's output against eager's, "
             "relative to eager's largest magnitude.", "",
             f"Streams (seed {seed}):", ""]
    for model in models:
        sizes = next((r.sizes for r in runs if r.model == model), None)
        drawn = f", mean {statistics.mean(sizes):.0f}" if sizes else ""
        count = len(sizes) if sizes else requests or STREAMS[model].requests
        lines.append(f"- {model}: {count} requests, {STREAMS[model].sizes()}{drawn}")
    header = ["model", "peer", "build s", "first ms", "stream s", f"vs {base}", "steady ms",
              f"vs {base}", "p50 ms", "p99 ms", f"p99 after {WARM_AFTER} ms", "RSS before MB",
              "peak RSS MB", "error"]
    lines += ["", *table(header, stream_rows(results)), ""]
    for key in PEER_KEYS:
        if key == BASE:
            continue
        speedups = [s for r in runs if r.peer == key
                    for s in [_vs_base(results, r.model, lambda x: x.stream_s, r)] if s]
        if speedups:
            lines.append(f"- {PEERS_BY_KEY[key].label}: geomean {ratio(geomean(speedups))} "
                         f"of {base}'s whole-stream time ({len(speedups)} streams)")
    stats = [r for r in runs if r.stats]
    if stats:
        lines += ["", "torch_graphfuse's kernel_stats() at the end of each stream:", ""]
        lines += [f"- {r.model}: " + ", ".join(f"{k} {v}" for k, v in r.stats.items())
                  for r in stats]
    wrong = [f"{r.model} {PEERS_BY_KEY[r.peer].label} ({r.error:.1e})" for r in runs
             if r.error is not None and not r.error <= zoo.FP32_TOLERANCE]
    lines += ["", f"Results off eager (over {zoo.FP32_TOLERANCE:g}): "
              f"{', '.join(wrong) if wrong else 'none'}.", ""]
    failed = [f"- {m} {PEERS_BY_KEY[k].label}: {r}" for (m, k), r in results.items()
              if isinstance(r, str)]
    return lines + (["Failures:", "", *failed, ""] if failed else [])


Interleaved = dict[str, InterleavedRun | str]  # model: the run, or why it failed


def _steady(ms: Sequence[float]) -> float:
    return statistics.mean(ms[-max(1, len(ms) // 3):])


def interleaved_speedups(runs: Interleaved, key: str) -> dict[str, float]:
    """Per model, the base peer's whole-stream time over the peer's, in one process."""
    return {model: sum(run.ms[BASE]) / sum(run.ms[key]) for model, run in runs.items()
            if isinstance(run, InterleavedRun) and BASE in run.ms and key in run.ms
            and key != BASE}


def interleaved_lines(runs: Interleaved) -> list[str]:
    base = PEERS_BY_KEY[BASE].label
    lines = ["## Request streams, the peers in one process", "",
             "The same streams, every peer in one process of its own per model: request i "
             "goes to each peer in turn, in an order rotated by i. Its times are the speed "
             "comparison (processes of one kind differ by 20-40% on this VM); its memory is "
             "the peers' together, so peak RSS comes from the section above. First 20 s: the "
             f"first {WARM_AFTER} requests (the profiling runs and the fusers' compiles). "
             f"vs {base}: its time over the peer's, in this process (above 1x: faster).", ""]
    rows = []
    for model, run in runs.items():
        if isinstance(run, str):
            rows.append([model, "all", failed_cell(run), *[""] * 7])
            continue
        for key, ms in run.ms.items():
            base_ms = run.ms.get(BASE)
            rows.append([
                model, PEERS_BY_KEY[key].label, f"{sum(ms) / 1e3:.2f}",
                ratio(sum(base_ms) / sum(ms) if base_ms else None),
                f"{sum(ms[:WARM_AFTER]) / 1e3:.2f}", _ms(_steady(ms)),
                ratio(_steady(base_ms) / _steady(ms) if base_ms else None),
                _ms(percentile(ms, 50)),
                _ms(percentile(ms[WARM_AFTER:], 99) if len(ms) > WARM_AFTER else None)])
    lines += table(["model", "peer", "stream s", f"vs {base}", f"first {WARM_AFTER} s",
                    "steady ms", f"vs {base}", "p50 ms", f"p99 after {WARM_AFTER} ms"], rows)
    lines.append("")
    for key in PEER_KEYS:
        speedups = interleaved_speedups(runs, key)
        if speedups:
            lines.append(f"- {PEERS_BY_KEY[key].label}: geomean {ratio(geomean(speedups.values()))}"
                         f" of {base}'s whole-stream time in one process ({len(speedups)} "
                         "streams)")
    return lines + [""]


def caller_lines(runs: Sequence[CallerRun] | str, seconds: float) -> list[str]:
    lines = ["## Concurrent callers", "",
             f"One module of {CALLERS_MODEL} (the zoo's input) per peer, traced, frozen and "
             "profiled, shared by that many Python threads, each with its own intra-op thread "
             f"count, calling it for {seconds:g} s after a first call each. The last row per "
             f"peer is one caller with {REFERENCE_THREADS} intra-op threads, for reference. "
             f"vs {PEERS_BY_KEY[BASE].label}: the peer's requests/s over its own at the same "
             "callers and threads.", ""]
    if isinstance(runs, str):
        return lines + [f"Not run: {runs}", ""]
    base = {(r.callers, r.threads): r.per_second for r in runs if r.peer == BASE}
    rows = [[PEERS_BY_KEY[r.peer].label, str(r.callers), str(r.threads)
             + (" (reference)" if r.threads != 1 else ""), str(r.requests),
             f"{r.per_second:.1f}",
             ratio(r.per_second / base[r.callers, r.threads]
                   if base.get((r.callers, r.threads)) else None),
             _ms(r.mean_ms), _ms(r.p99_ms)]
            for r in sorted(runs, key=lambda r: (CALLER_PEERS.index(r.peer), r.threads,
                                                 r.callers))]
    return lines + table(["peer", "callers", "intra-op threads each", "requests", "requests/s",
                          f"vs {PEERS_BY_KEY[BASE].label}", "mean ms", "p99 ms"], rows) + [""]


def report(results: Results, interleaved: Interleaved, callers: Sequence[CallerRun] | str | None,
           requests: int | None, seed: int, seconds: float, command: str) -> str:
    lines = ["# Serving traffic: request sizes that change from call to call", "",
             f"Machine: {machine()}, torch {torch.__version__}  ", f"Date: {utc_now()}  ",
             f"Command: `{command}`", "", *stream_lines(results, requests, seed)]
    if interleaved:
        lines += interleaved_lines(interleaved)
    if callers is not None:
        lines += caller_lines(callers, seconds)
    return "\n".join(lines)


def _latencies(ax: Any, runs: Sequence[StreamRun], model: str) -> None:
    """Each peer's latency over one model's stream."""
    for run in (r for r in runs if r.model == model):
        ax.plot(range(1, len(run.ms) + 1), run.ms, label=PEERS_BY_KEY[run.peer].label,
                linewidth=0.9)
    ax.set_yscale("log")
    ax.set_title(f"{model}: {STREAMS[model].sizes()}", fontsize=9)
    ax.set_xlabel("request")
    ax.set_ylabel("latency ms")
    ax.legend(fontsize=6)


def _stream_speedups(ax: Any, interleaved: Interleaved, models: Sequence[str],
                     keys: Sequence[str]) -> None:
    """Each peer's whole-stream speedup over the base peer, per model, in one process."""
    plots.bars(ax, [(PEERS_BY_KEY[k].label, [
        interleaved_speedups(interleaved, k).get(m, 0.0) for m in models]) for k in keys])
    plots.x_labels(ax, models, rotation=30, fontsize=8)
    ax.set_yscale("log")  # from compile-bound streams (0.01x) to eager's (10x)
    ticks = plots.pyplot().FuncFormatter(lambda value, _: f"{value:g}x")
    ax.yaxis.set_major_formatter(ticks)
    ax.yaxis.set_minor_formatter(ticks)
    ax.set_ylabel(f"whole stream, one process: over {PEERS_BY_KEY[BASE].label}", fontsize=8)
    ax.legend(fontsize=6)


def _caller_speedups(ax: Any, runs: Sequence[CallerRun]) -> None:
    """torch_graphfuse's requests/s over the base peer's, per callers and threads."""
    base = {(r.callers, r.threads): r.per_second for r in runs if r.peer == BASE}
    plots.bars(ax, [(PEERS_BY_KEY[key].label, [
        r.per_second / base[r.callers, r.threads] if base.get((r.callers, r.threads)) else 0.0
        for r in runs if r.peer == key]) for key in CALLER_PEERS if key != BASE])
    plots.x_labels(ax, [f"{r.callers} x {r.threads}" for r in runs if r.peer != BASE],
                   rotation=0, fontsize=8)
    ax.set_xlabel("callers x intra-op threads each", fontsize=8)
    ax.set_ylabel(f"requests/s over {PEERS_BY_KEY[BASE].label}", fontsize=8)
    ax.set_title(f"{CALLERS_MODEL}, one module shared by the callers", fontsize=9)
    ax.legend(fontsize=6)


def plot(results: Results, interleaved: Interleaved, callers: Sequence[CallerRun] | str | None,
         path: Path) -> None:
    """Per model, each peer's latency over the stream; then each peer's whole-stream speedup
    over TorchScript per model (the peers in one process), and torch_graphfuse's throughput
    over TorchScript's per number of callers (each where there is something to compare)."""
    runs = [r for r in results.values() if isinstance(r, StreamRun)]
    models = list(dict.fromkeys(r.model for r in runs))
    others = [k for k in PEER_KEYS if k != BASE and any(interleaved_speedups(interleaved, k))]
    panels: list[Callable[[Any], None]] = [
        functools.partial(_latencies, runs=runs, model=m) for m in models]
    if others:
        panels.append(functools.partial(_stream_speedups, interleaved=interleaved,
                                        models=list(interleaved), keys=others))
    if isinstance(callers, list) and len({r.peer for r in callers}) > 1:
        panels.append(functools.partial(_caller_speedups, runs=callers))
    columns = min(3, len(panels))
    rows = -(-len(panels) // columns)
    plt = plots.pyplot()
    fig, axes = plt.subplots(rows, columns, squeeze=False,
                             figsize=(5.0 * columns, 3.8 * rows))
    for i, ax in enumerate(axes.flat):
        if i < len(panels):
            panels[i](ax)
        else:
            ax.set_visible(False)
    fig.suptitle(f"serving traffic: {machine()}", fontsize=10)
    plots.save(fig, path)


def main(argv: Sequence[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default=",".join(STREAMS), help="zoo names, of the streams")
    parser.add_argument("--requests", type=int,
                        help="requests per stream (default: 120 per text model, 48 per image "
                             "model)")
    parser.add_argument("--seed", type=int, default=0, help="the streams' seed")
    parser.add_argument("--peers", default=",".join(PEER_KEYS), help="of " + ",".join(PEER_KEYS))
    parser.add_argument("--callers", default="1,2,4",
                        help="threads sharing one module ('': no concurrency section)")
    parser.add_argument("--seconds", type=float, default=5.0, help="per number of callers")
    parser.add_argument("--small", action="store_true", help="the small configurations")
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent)
    parser.add_argument("--limit", type=float, default=3600.0,
                        help="seconds a child (one model and peer) may run before it is stopped")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    names = zoo_models(args.models)
    keys = comma_list(args.peers)
    unknown = sorted(set(names) - set(STREAMS)) + sorted(set(keys) - set(PEER_KEYS))
    if unknown:
        raise SystemExit(f"no stream or peer: {', '.join(unknown)}")
    warnings.filterwarnings("ignore")  # the libraries' deprecation notices, per model
    if args.child:
        child(args.child, args)
        return
    command = command_line()
    args.out.mkdir(parents=True, exist_ok=True)
    results: Results = {}
    interleaved: Interleaved = {}
    callers: list[CallerRun] | str | None = None

    def write() -> None:  # after every child, so that an interrupted run leaves its results
        (args.out / "RESULTS_traffic.md").write_text(report(
            results, interleaved, callers, args.requests, args.seed, args.seconds, command))
        if any(isinstance(r, StreamRun) for r in results.values()):
            plot(results, interleaved, callers, args.out / "traffic.png")

    for i, name in enumerate(names, 1):
        for key in keys:
            progress(f"[{i}/{len(names)}] {name} | {PEERS_BY_KEY[key].label}")
            data = in_child(f"stream {name} {key}", argv, args.limit)
            results[name, key] = data if isinstance(data, str) else StreamRun(**data)
            run = results[name, key]
            progress(f"  failed: {run}" if isinstance(run, str) else
                     f"  build {run.build_s:.2f} s, stream {run.stream_s:.2f} s, steady "
                     f"{run.steady_ms:.1f} ms, peak RSS {run.peak_rss_mb:.0f} MB")
            write()
        if len(keys) > 1:
            progress(f"[{i}/{len(names)}] {name} | the peers in one process")
            data = in_child(f"interleaved {name}", argv, args.limit)
            interleaved[name] = data if isinstance(data, str) else InterleavedRun(**data)
            if isinstance(data, str):
                progress(f"  failed: {data}")
            else:
                progress("  " + ", ".join(f"{PEERS_BY_KEY[k].label} {sum(ms) / 1e3:.2f} s"
                                          for k, ms in interleaved[name].ms.items()))
            write()
    if comma_list(args.callers):
        progress(f"concurrent callers: {CALLERS_MODEL}")
        data = in_child("callers", argv, args.limit)
        callers = data if isinstance(data, str) else [CallerRun(**r) for r in data]
        write()
    progress(f"wrote {args.out / 'RESULTS_traffic.md'} and {args.out / 'traffic.png'}")


if __name__ == "__main__":
    main(sys.argv[1:])
