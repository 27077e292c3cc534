"""GPU benchmark: torch_graphfuse's cuDNN fusion groups against eager, frozen TorchScript
and torch.compile(mode="max-autotune") on ResNet-50 and BERT-base, in fp16 and bf16
(model and inputs cast), on one CUDA GPU, in one process with the same inputs.

    python benchmarks/gpu_bench.py [--quick] [--models resnet50,bert] [--dtypes fp16,bf16]
                                   [--peers eager,script,max_autotune,graphfuse] [--out DIR]

Writes GPU_RESULTS.md and gpu_speedup.png into benchmarks/ (GPU_RESULTS-quick.md and
gpu_speedup-quick.png for --quick). Needs a CUDA GPU and the cuda extra: run it through
scripts/gpu_test.sh --bench on a GPU machine.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import dataclasses
import datetime
import math
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import torch
from torch import nn

import torch_graphfuse
from torch_graphfuse.testing import runner
from torch_graphfuse.testing.models import resnet18, resnet50
from torch_graphfuse.testing.transformer import additive_mask, bert_base, bert_layer

Inputs = list[torch.Tensor]
Call = Callable[[], torch.Tensor]

BERT_SEQ = 128
DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}


# ---------------------------------------------------------------- workloads


@dataclasses.dataclass(frozen=True)
class Workload:
    name: str
    build: Callable[[], nn.Module]
    inputs: Callable[[int, torch.dtype], Inputs]  # on the GPU, from batch and dtype
    batches: tuple[int, ...]


def _images(resolution: int) -> Callable[[int, torch.dtype], Inputs]:
    def make(batch: int, dtype: torch.dtype) -> Inputs:
        return [torch.randn(batch, 3, resolution, resolution, device="cuda", dtype=dtype)]
    return make


def _bert_inputs(batch: int, dtype: torch.dtype) -> Inputs:
    """Hidden states and the additive mask, the last eighth of each sequence padding."""
    states = torch.randn(batch, BERT_SEQ, 768, device="cuda", dtype=dtype)
    attended = torch.ones(batch, BERT_SEQ, dtype=torch.long, device="cuda")
    attended[:, BERT_SEQ - BERT_SEQ // 8:] = 0
    return [states, additive_mask(attended, dtype)]


FULL = {
    "resnet50": Workload("ResNet-50 224", resnet50, _images(224), (1, 32)),
    "bert": Workload(f"BERT-base s{BERT_SEQ}", bert_base, _bert_inputs, (1, 16)),
}
QUICK = {  # small stand-ins, batch 1 only
    "resnet50": Workload("ResNet-18 112", resnet18, _images(112), (1,)),
    "bert": Workload(f"BERT layer s{BERT_SEQ}", bert_layer, _bert_inputs, (1,)),
}


@dataclasses.dataclass(frozen=True)
class Config:
    workload: Workload
    batch: int
    dtype: str  # key of DTYPES

    @property
    def label(self) -> str:
        return f"{self.workload.name} b{self.batch} {self.dtype}"


def configs(models: Sequence[str], dtypes: Sequence[str], quick: bool) -> list[Config]:
    workloads = QUICK if quick else FULL
    unknown = (set(models) - set(workloads)) | (set(dtypes) - set(DTYPES))
    if unknown:
        raise SystemExit(f"unknown models or dtypes: {', '.join(sorted(unknown))}")
    return [Config(workloads[m], batch, d) for m in models
            for batch in workloads[m].batches for d in dtypes]


# ---------------------------------------------------------------- peers


def _eager(model: nn.Module, inputs: Inputs) -> Call:
    return lambda: model(*inputs)


def _script(model: nn.Module, inputs: Inputs) -> Call:
    """Trace, freeze and run the profiling runs (where torch_graphfuse fuses, when on)."""
    module = runner.profiled(model, inputs)
    return lambda: module(*inputs)


def _max_autotune(model: nn.Module, inputs: Inputs) -> Call:
    torch._dynamo.reset()
    torch._inductor.config.freezing = True  # folds weights, as freezing does for the others
    compiled = torch.compile(copy.deepcopy(model), mode="max-autotune")
    compiled(*inputs)
    return lambda: compiled(*inputs)


@dataclasses.dataclass(frozen=True)
class Peer:
    key: str
    label: str
    build: Callable[[nn.Module, Inputs], Call]
    graphfuse: bool = False


PEERS = (
    Peer("eager", "eager", _eager),
    Peer("script", "TorchScript (frozen)", _script),
    Peer("max_autotune", "torch.compile max-autotune", _max_autotune),
    Peer("graphfuse", "torch_graphfuse (cuDNN)", _script, graphfuse=True),
)
PEERS_BY_KEY = {p.key: p for p in PEERS}


# ---------------------------------------------------------------- measuring


@dataclasses.dataclass(frozen=True)
class Timing:
    warmup: int
    iters: int
    rounds: int  # the peers take turns, so that a change in the GPU's clocks hits all


@dataclasses.dataclass(frozen=True)
class Measurement:
    ms: float
    diff: float  # max abs diff against eager
    first_ms: float  # building the peer and its first call
    note: str = ""


Result = Measurement | str  # a string is why the peer failed


def _progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _failure(error: Exception) -> str:
    text = f"{type(error).__name__}: {error}".strip().splitlines()[0]
    return text if len(text) <= 160 else text[:157] + "..."


def gpu_ms(call: Call, warmup: int, iters: int) -> float:
    """Median ms of `call` between CUDA events, each call waited for: latency as a
    caller sees it, host overhead included where it starves the GPU."""
    for _ in range(warmup):
        call()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        call()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


@contextlib.contextmanager
def _cold_plan_cache() -> Iterator[None]:
    """torch_graphfuse plans from scratch: an empty cache folder, no plans in memory."""
    from torch_graphfuse.backends.cudnn import plans, runtime

    previous = os.environ.get(plans.CACHE_DIR_ENV)
    with tempfile.TemporaryDirectory() as folder:
        os.environ[plans.CACHE_DIR_ENV] = folder
        runtime.reset()
        try:
            yield
        finally:
            if previous is None:
                del os.environ[plans.CACHE_DIR_ENV]
            else:
                os.environ[plans.CACHE_DIR_ENV] = previous
            runtime.reset()


def _built(peer: Peer, model: nn.Module, inputs: Inputs) -> tuple[Call, float]:
    start = time.perf_counter()
    with torch_graphfuse.fuser(peer.graphfuse):
        call = peer.build(model, inputs)
        call()
    torch.cuda.synchronize()
    return call, (time.perf_counter() - start) * 1e3


def _graphfuse_note(call: Call, warm_first_ms: float) -> str:
    """cuDNN groups in the optimized graph, plan counts, and a warm start's first call."""
    from torch_graphfuse.backends.cudnn import runtime

    with torch_graphfuse.fuser(True):
        call()
        graph = torch.jit.last_executed_optimized_graph()
    groups = [g for g in runner.fusion_groups(graph)
              if g.hasAttribute("backend") and g.s("backend") == "cudnn"]
    stats = runtime.stats()
    failures = f", {stats['failures']} failed runs" if stats["failures"] else ""
    return (f"{len(groups)} cuDNN groups, {stats['plans_built']} plans built in "
            f"{stats['build_ms']:.0f} ms{failures}; first call with plans on disk: "
            f"{warm_first_ms:.0f} ms")


def run_config(config: Config, peers: Sequence[Peer], timing: Timing) -> dict[str, Result]:
    torch.manual_seed(0)
    dtype = DTYPES[config.dtype]
    model = config.workload.build().eval().to("cuda", dtype)
    inputs = config.workload.inputs(config.batch, dtype)
    calls: dict[str, Call] = {}
    results: dict[str, Result] = {}
    with torch.no_grad():
        reference = model(*inputs)
        for peer in peers:
            _progress(f"  building {peer.label}")
            try:
                if peer.graphfuse:
                    with _cold_plan_cache():
                        calls[peer.key], first_ms = _built(peer, model, inputs)
                        note = _graphfuse_note(calls[peer.key],
                                               _warm_first_ms(peer, model, inputs))
                else:
                    calls[peer.key], first_ms = _built(peer, model, inputs)
                    note = ""
                diff = (calls[peer.key]().float() - reference.float()).abs().max().item()
                results[peer.key] = Measurement(math.inf, diff, first_ms, note)
            except Exception as error:  # reported, never ends the run
                results[peer.key] = _failure(error)
                _progress(f"  {peer.label}: failed: {results[peer.key]}")
        for _ in range(timing.rounds):
            for peer in peers:
                if peer.key not in calls:
                    continue
                with torch_graphfuse.fuser(peer.graphfuse):
                    ms = gpu_ms(calls[peer.key], timing.warmup, timing.iters)
                measured = results[peer.key]
                assert isinstance(measured, Measurement)
                results[peer.key] = dataclasses.replace(measured, ms=min(measured.ms, ms))
    return results


def _warm_first_ms(peer: Peer, model: nn.Module, inputs: Inputs) -> float:
    """The first call of a fresh module whose plans are on disk, not in memory."""
    from torch_graphfuse.backends.cudnn import runtime

    runtime.plan_cache().clear_memory()
    _, first_ms = _built(peer, model, inputs)
    return first_ms


# ---------------------------------------------------------------- report


Runs = dict[Config, dict[str, Result]]


def _cell(result: Result, fmt: Callable[[Measurement], str]) -> str:
    if isinstance(result, str):
        return "failed: " + result.replace("|", "\\|")[:60]
    return fmt(result)


def _speedup(results: dict[str, Result], over: str, peer: str = "graphfuse") -> float | None:
    base, ours = results.get(over), results.get(peer)
    if not isinstance(base, Measurement) or not isinstance(ours, Measurement):
        return None
    return base.ms / ours.ms


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header),
            *("| " + " | ".join(row) + " |" for row in rows)]


def latency_table(runs: Runs, peers: Sequence[Peer]) -> list[str]:
    header = ["model", "batch", "dtype", *(f"{p.label} ms" for p in peers),
              "speedup vs eager", "speedup vs max-autotune", "torch_graphfuse max abs diff"]
    rows = []
    for config, results in runs.items():
        speedups = [_speedup(results, key) for key in ("eager", "max_autotune")]
        ours = results.get("graphfuse", "not run")
        rows.append([config.workload.name, str(config.batch), config.dtype,
                     *(_cell(results[p.key], lambda m: f"{m.ms:.3f}") for p in peers),
                     *("-" if s is None else f"{s:.2f}x" for s in speedups),
                     _cell(ours, lambda m: f"{m.diff:.2e}")])
    return _table(header, rows)


def first_call_table(runs: Runs, peers: Sequence[Peer]) -> list[str]:
    header = ["model", "batch", "dtype", *(p.label for p in peers if p.key != "eager")]
    rows = [[c.workload.name, str(c.batch), c.dtype,
             *(_cell(results[p.key], lambda m: f"{m.first_ms:.0f}")
               for p in peers if p.key != "eager")] for c, results in runs.items()]
    return _table(header, rows)


def note_lines(runs: Runs) -> list[str]:
    return [f"- {config.label}: {results['graphfuse'].note}" for config, results in runs.items()
            if isinstance(results.get("graphfuse"), Measurement)]


def report(runs: Runs, peers: Sequence[Peer], command: str, quick: bool) -> str:
    import cudnn

    from torch_graphfuse.backends.cudnn import plans

    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return "\n".join([
        "# torch_graphfuse GPU benchmark" + (" (quick smoke run)" if quick else ""), "",
        f"GPU: {torch.cuda.get_device_name()}, torch {torch.__version__} (CUDA "
        f"{torch.version.cuda}), cuDNN {cudnn.backend_version()} with frontend "
        f"{cudnn.__version__}  ",
        f"Date: {date}  ", f"Command: `{command}`", "",
        "Median latency in ms between CUDA events, each call waited for, best of the rounds "
        "in which the peers take turns. Model and inputs are cast to the dtype. Max abs diff "
        "is against eager in the same dtype. Plans are chosen by cuDNN's heuristics"
        + (f" and timed ({plans.AUTOTUNE_ENV}=1)" if plans.autotune_enabled() else "") + ".",
        "",
        "## Latency", "", *latency_table(runs, peers), "",
        "## First call (ms)", "",
        "Building the peer and its first call, in this process: trace + freeze + profiling "
        "runs for the TorchScript peers (torch_graphfuse from an empty plan cache), "
        "compilation for torch.compile.", "",
        *first_call_table(runs, peers), "",
        "## torch_graphfuse's cuDNN groups", "", *note_lines(runs), "",
    ])


def plot(runs: Runs, peers: Sequence[Peer], path: Path) -> None:
    """Grouped bars: each peer's speedup over eager, per configuration."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = [p for p in peers if p.key != "eager"]
    width = 0.8 / max(len(shown), 1)
    fig, ax = plt.subplots(figsize=(max(6.0, 1.2 * len(runs)), 4.5))
    for i, peer in enumerate(shown):
        speedups = [_speedup(results, "eager", peer.key) or 0.0 for results in runs.values()]
        offset = (i - (len(shown) - 1) / 2) * width
        ax.bar([x + offset for x in range(len(runs))], speedups, width, label=peer.label)
    ax.axhline(1.0, color="black", linewidth=0.8, linestyle="--")
    ax.set_xticks(range(len(runs)))
    ax.set_xticklabels([c.label for c in runs], rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("speedup over eager")
    ax.set_title(torch.cuda.get_device_name(), fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


# ---------------------------------------------------------------- main


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="small batch-1 stand-ins and few iterations (smoke run)")
    parser.add_argument("--models", default="resnet50,bert",
                        help="comma-separated subset of resnet50,bert")
    parser.add_argument("--dtypes", default="fp16,bf16", help="comma-separated subset of fp16,bf16")
    parser.add_argument("--peers", default=",".join(PEERS_BY_KEY),
                        help=f"comma-separated subset of {','.join(PEERS_BY_KEY)} (eager is "
                             "always run: it is the reference)")
    parser.add_argument("--out", type=Path, default=None,
                        help="output folder (default: benchmarks/, and *-quick files for --quick)")
    return parser.parse_args(argv)


def _split(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def main(argv: Sequence[str]) -> None:
    args = parse_args(argv)
    if not torch.cuda.is_available():
        raise SystemExit(
            f"gpu_bench.py needs a CUDA GPU: torch {torch.__version__} sees none (CUDA build: "
            f"{torch.version.cuda or 'no'}). Run it on a GPU machine with "
            "scripts/gpu_test.sh --bench, which installs a CUDA torch and the cuda extra.")
    try:
        import cudnn  # noqa: F401
    except ImportError:
        raise SystemExit("gpu_bench.py needs the cuDNN frontend: pip install -e '.[cuda]' "
                         "(scripts/gpu_test.sh does)") from None
    unknown = set(_split(args.peers)) - set(PEERS_BY_KEY)
    if unknown:
        raise SystemExit(f"unknown peers: {', '.join(sorted(unknown))}")
    peers = [p for p in PEERS if p.key == "eager" or p.key in _split(args.peers)]
    todo = configs(_split(args.models), _split(args.dtypes), args.quick)
    timing = Timing(3, 10, 2) if args.quick else Timing(10, 50, 3)
    suffix = "-quick" if args.quick and args.out is None else ""
    out = args.out or Path(__file__).resolve().parent
    out.mkdir(parents=True, exist_ok=True)

    runs: Runs = {}
    for i, config in enumerate(todo, 1):
        _progress(f"[{i}/{len(todo)}] {config.label}")
        runs[config] = run_config(config, peers, timing)
    results = out / f"GPU_RESULTS{suffix}.md"
    results.write_text(report(runs, peers, " ".join(["python", *sys.argv]), args.quick))
    plot(runs, peers, out / f"gpu_speedup{suffix}.png")
    _progress(f"wrote {results} and {out / f'gpu_speedup{suffix}.png'}")


if __name__ == "__main__":
    main(sys.argv[1:])
