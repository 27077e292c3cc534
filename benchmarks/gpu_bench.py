"""GPU benchmark: torch_graphfuse's cuDNN fusion groups against eager PyTorch, torch.compile
(default mode and max-autotune-no-cudagraphs) and frozen TorchScript, on ResNet-50
(channels_last) and BERT-base (seq 128), in fp16 and bf16 (model and inputs cast), at batch 1
and 32, on one CUDA GPU.

    python benchmarks/gpu_bench.py [--quick] [--models resnet50,bert] [--dtypes fp16,bf16]
        [--batches 1,32] [--peers eager,compile,max_autotune,script,graphfuse]
        [--timeout SECONDS] [--out DIR]

Every peer of every configuration runs in a child process of its own (this script again, with
a hidden --one MODEL,DTYPE,BATCH,PEER), which prints its result as one JSON line: one peer's
compile caches, cudnn.benchmark choices, memory or crash cannot touch another's numbers. A
child that crashes, or runs past --timeout, becomes a "failed: why" cell.

Two loops per peer, after a warm-up, both timed with time.perf_counter around
torch.cuda.synchronize() rather than CUDA events, which would leave out the host work before
the first kernel and after the last, a large part of a batch-1 call:
  latency: one call at a time, each waited for; the median, in ms.
  throughput: calls issued back to back, one synchronize per round; samples/s, best round.

Writes GPU_RESULTS.md and gpu_speedup.png into benchmarks/ (GPU_RESULTS-quick.md and
gpu_speedup-quick.png for --quick). Needs a CUDA GPU and the cuda extra: run it through
scripts/gpu_test.sh --bench on a GPU machine.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import math
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import torch
from torch import nn

import torch_graphfuse
from torch_graphfuse.backends.cudnn import plans
from torch_graphfuse.testing import runner
from torch_graphfuse.testing.models import resnet18, resnet50
from torch_graphfuse.testing.transformer import additive_mask, bert_base, bert_layer

Inputs = list[torch.Tensor]
Call = Callable[[], torch.Tensor]

BERT_SEQ = 128
DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}
BATCHES = (1, 32)
QUICK_BATCHES = (1,)
RESULT_MARKER = "GPU_BENCH_RESULT "  # starts the child's result line: libraries print too
DEFAULT_TIMEOUT_S = 1800.0  # per child: max-autotune takes minutes over ResNet-50's convolutions


# ---------------------------------------------------------------- workloads


@dataclasses.dataclass(frozen=True)
class Workload:
    name: str
    build: Callable[[], nn.Module]
    inputs: Callable[[int, torch.dtype], Inputs]  # on the GPU, from batch and dtype
    memory_format: torch.memory_format = torch.contiguous_format


def _images(resolution: int) -> Callable[[int, torch.dtype], Inputs]:
    def make(batch: int, dtype: torch.dtype) -> Inputs:
        images = torch.randn(batch, 3, resolution, resolution)
        return [images.to("cuda", dtype, memory_format=torch.channels_last)]
    return make


def _bert_inputs(batch: int, dtype: torch.dtype) -> Inputs:
    """Hidden states and the additive mask, the last eighth of each sequence padding. The mask
    is built in the dtype: fp32's minimum would overflow to -inf in fp16."""
    states = torch.randn(batch, BERT_SEQ, 768)
    attended = torch.ones(batch, BERT_SEQ, dtype=torch.long)
    attended[:, BERT_SEQ - BERT_SEQ // 8:] = 0
    return [states.to("cuda", dtype), additive_mask(attended, dtype).to("cuda")]


FULL = {
    "resnet50": Workload("ResNet-50 224 NHWC", resnet50, _images(224), torch.channels_last),
    "bert": Workload(f"BERT-base s{BERT_SEQ}", bert_base, _bert_inputs),
}
QUICK = {  # small stand-ins: max-autotune alone takes minutes over the full models
    "resnet50": Workload("ResNet-18 112 NHWC", resnet18, _images(112), torch.channels_last),
    "bert": Workload(f"BERT layer s{BERT_SEQ}", bert_layer, _bert_inputs),
}


@dataclasses.dataclass(frozen=True)
class Config:
    model: str  # key of FULL / QUICK
    workload: Workload
    batch: int
    dtype: str  # key of DTYPES

    @property
    def label(self) -> str:
        return f"{self.workload.name} b{self.batch} {self.dtype}"


def configs(models: Sequence[str], dtypes: Sequence[str], batches: Sequence[int],
            quick: bool) -> list[Config]:
    """Model by model, then dtype, then batch: the report's row order."""
    workloads = QUICK if quick else FULL
    unknown = (set(models) - set(workloads)) | (set(dtypes) - set(DTYPES))
    if unknown:
        raise SystemExit(f"unknown models or dtypes: {', '.join(sorted(unknown))}")
    return [Config(m, workloads[m], batch, d) for m in models for d in dtypes for batch in batches]


# ---------------------------------------------------------------- peers


def _eager(model: nn.Module, inputs: Inputs) -> Call:
    return lambda: model(*inputs)


def _compiled(mode: str | None) -> Callable[[nn.Module, Inputs], Call]:
    def build(model: nn.Module, inputs: Inputs) -> Call:
        # Weights become constants inductor can fold, as torch.jit.freeze makes them for the
        # TorchScript peers: otherwise batch norms stay separate kernels here alone.
        torch._inductor.config.freezing = True
        compiled = torch.compile(model, mode=mode)
        return lambda: compiled(*inputs)
    return build


def _script(model: nn.Module, inputs: Inputs) -> Call:
    """Trace, freeze and the profiling runs (where torch_graphfuse fuses, when on)."""
    module = runner.profiled(model, inputs)
    return lambda: module(*inputs)


@dataclasses.dataclass(frozen=True)
class Peer:
    key: str
    label: str
    short: str  # in "torch_graphfuse vs ..." column headers
    build: Callable[[nn.Module, Inputs], Call]
    graphfuse: bool = False


GRAPHFUSE = "graphfuse"
PEERS = (
    Peer("eager", "eager", "eager", _eager),
    Peer("compile", "torch.compile", "compile", _compiled(None)),
    Peer("max_autotune", "torch.compile max-autotune-no-cudagraphs", "max-autotune",
         _compiled("max-autotune-no-cudagraphs")),
    Peer("script", "TorchScript (frozen)", "TorchScript", _script),
    Peer(GRAPHFUSE, "torch_graphfuse (cuDNN)", "torch_graphfuse", _script, graphfuse=True),
)
PEERS_BY_KEY = {p.key: p for p in PEERS}


# ---------------------------------------------------------------- measuring (in the child)


@dataclasses.dataclass(frozen=True)
class Timing:
    warmup_s: float  # calls before any timing, at least this long: clocks and caches settle
    latency_iters: int
    round_s: float  # GPU time a throughput round is sized to, from the measured latency
    rounds: int
    max_loop_s: float = 60.0  # a slow peer's latency loop stops here, after 5 calls


FULL_TIMING = Timing(warmup_s=2.0, latency_iters=100, round_s=1.0, rounds=3)
QUICK_TIMING = Timing(warmup_s=0.5, latency_iters=20, round_s=0.2, rounds=1)


@dataclasses.dataclass(frozen=True)
class Measurement:
    latency_ms: float
    throughput: float  # samples/s
    first_s: float  # building the peer and its first call
    diff: float  # max abs diff against eager in the same dtype
    note: str = ""


Result = Measurement | str  # a string is why the peer failed


def warm_up(call: Call, seconds: float) -> None:
    deadline = time.perf_counter() + seconds
    calls = 0
    while calls < 3 or time.perf_counter() < deadline:
        call()
        torch.cuda.synchronize()
        calls += 1


def latency_ms(call: Call, timing: Timing) -> float:
    """Median ms of one call, each waited for: what a caller sees, host overhead included."""
    times: list[float] = []
    deadline = time.perf_counter() + timing.max_loop_s
    for _ in range(timing.latency_iters):
        start = time.perf_counter()
        call()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - start) * 1e3)
        if len(times) >= 5 and time.perf_counter() > deadline:
            break
    return statistics.median(times)


def throughput(call: Call, batch: int, latency: float, timing: Timing) -> float:
    """Samples/s of calls issued back to back: the host queues the next call's kernels while
    the GPU runs this one's. The best round counts, as interference only ever slows one."""
    calls = max(10, math.ceil(timing.round_s * 1e3 / latency))
    best = 0.0
    for _ in range(timing.rounds):
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(calls):
            call()
        torch.cuda.synchronize()
        best = max(best, calls * batch / (time.perf_counter() - start))
    return best


def _graphfuse_note(call: Call) -> str:
    """cuDNN groups in the optimized graph and what building their plans took."""
    from torch_graphfuse.backends.cudnn import runtime  # loads cuDNN: the plugin's child only

    call()
    graph = torch.jit.last_executed_optimized_graph()
    groups = [g for g in runner.fusion_groups(graph)
              if g.hasAttribute("backend") and g.s("backend") == "cudnn"]
    stats = runtime.stats()
    failures = f", {stats['failures']:.0f} failed runs" if stats["failures"] else ""
    return (f"{len(groups)} cuDNN groups, {stats['plans_built']:.0f} plans built in "
            f"{stats['build_ms']:.0f} ms{failures}")


def run_job(config: Config, peer: Peer, timing: Timing) -> Measurement:
    # ATen's convolutions time their algorithms, for every peer: the eager baseline at its
    # best, and the ones torch.compile and unfused TorchScript nodes fall back to.
    torch.backends.cudnn.benchmark = True
    torch.manual_seed(0)  # the same weights and inputs in every child
    dtype = DTYPES[config.dtype]
    model = config.workload.build().eval().to(
        "cuda", dtype, memory_format=config.workload.memory_format)
    inputs = config.workload.inputs(config.batch, dtype)
    with torch.no_grad(), torch_graphfuse.fuser(peer.graphfuse):
        reference = model(*inputs)
        start = time.perf_counter()
        call = peer.build(model, inputs)
        out = call()
        torch.cuda.synchronize()
        first_s = time.perf_counter() - start
        diff = (out.float() - reference.float()).abs().max().item()
        warm_up(call, timing.warmup_s)
        latency = latency_ms(call, timing)
        rate = throughput(call, config.batch, latency, timing)
        note = _graphfuse_note(call) if peer.graphfuse else ""
    return Measurement(latency, rate, first_s, diff, note)


# ---------------------------------------------------------------- the child protocol


def job_spec(config: Config, peer: Peer) -> str:
    return f"{config.model},{config.dtype},{config.batch},{peer.key}"


def parse_spec(spec: str, quick: bool) -> tuple[Config, Peer]:
    try:
        model, dtype, batch, peer = spec.split(",")
        return configs([model], [dtype], [int(batch)], quick)[0], PEERS_BY_KEY[peer]
    except (ValueError, KeyError):
        raise SystemExit(f"--one takes MODEL,DTYPE,BATCH,PEER, not {spec!r}") from None


def _failure(error: Exception) -> str:
    return _short(f"{type(error).__name__}: {error}".strip().splitlines()[0])


def _short(text: str) -> str:
    return text if len(text) <= 160 else text[:157] + "..."


def encode(result: Result) -> str:
    return json.dumps({"failed": result} if isinstance(result, str) else dataclasses.asdict(result))


def parse_output(stdout: str) -> Result | None:
    """The result on a child's last result line; None where it printed none."""
    lines = [line for line in stdout.splitlines() if line.startswith(RESULT_MARKER)]
    if not lines:
        return None
    try:
        data = json.loads(lines[-1][len(RESULT_MARKER):])
        return str(data["failed"]) if "failed" in data else Measurement(**data)
    except (ValueError, TypeError) as error:
        return _short(f"unreadable result line: {error}")


def child(spec: str, quick: bool) -> None:
    """--one: one peer on one configuration, its result printed as a line for the parent."""
    config, peer = parse_spec(spec, quick)
    result: Result
    try:
        # An empty plan cache: torch_graphfuse's first call builds its plans, run after run.
        with tempfile.TemporaryDirectory() as plan_cache:
            os.environ[plans.CACHE_DIR_ENV] = plan_cache
            result = run_job(config, peer, QUICK_TIMING if quick else FULL_TIMING)
    except Exception as error:  # the parent's cell says why
        result = _failure(error)
    # On a line of its own even after a library's output that did not end its line.
    print("\n" + RESULT_MARKER + encode(result), flush=True)


def child_command(config: Config, peer: Peer, quick: bool) -> list[str]:
    return [sys.executable, str(Path(__file__).resolve()), "--one", job_spec(config, peer),
            *(["--quick"] if quick else [])]


def _crash(returncode: int, stderr: str) -> str:
    """Why a child printed no result: its exit status and its last line on stderr."""
    if returncode < 0:
        try:
            what = f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            what = f"killed by signal {-returncode}"
    else:
        what = f"exit code {returncode}"
    last = next((line.strip() for line in reversed(stderr.splitlines()) if line.strip()), "")
    return _short(f"{what}: {last}" if last else f"{what}, no result line")


def _kill_group(process: subprocess.Popen[str]) -> None:
    """The child and whatever it started (inductor's compile workers): a session of their own."""
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def run_child(command: Sequence[str], timeout_s: float) -> Result:
    """Run one child: its result line, or why there is none. A result line counts even when
    the child crashes afterwards, in teardown: the measurement was complete."""
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          start_new_session=True) as process:
        try:
            out, err = process.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _kill_group(process)
            return f"timed out after {timeout_s:g} s"
        except BaseException:  # Ctrl-C: the child, in its own session, did not get it
            _kill_group(process)
            raise
    result = parse_output(out)
    if result is None:
        result = _crash(process.returncode, err)
        for line in err.splitlines()[-20:]:  # the cell keeps one line of it
            _progress(f"    | {line}")
    return result


# ---------------------------------------------------------------- report


Runs = dict[Config, dict[str, Result]]


@dataclasses.dataclass(frozen=True)
class Metric:
    name: str
    unit: str
    value: Callable[[Measurement], float]
    higher_is_better: bool
    fmt: str

    @property
    def title(self) -> str:
        return f"{self.name} ({self.unit})"


LATENCY = Metric("Latency", "ms", lambda m: m.latency_ms, False, "{:.3f}")
THROUGHPUT = Metric("Throughput", "samples/s", lambda m: m.throughput, True, "{:.0f}")


def _progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _cell(result: Result | None, fmt: Callable[[Measurement], str]) -> str:
    if result is None:  # not run yet: the report is rewritten as the children finish
        return "-"
    if isinstance(result, str):  # shortened before escaping, so no "\" is left without its "|"
        return "failed: " + result[:60].replace("|", "\\|")
    return fmt(result)


def speedup(results: dict[str, Result], metric: Metric, over: str,
            peer: str = GRAPHFUSE) -> float | None:
    """How many times faster `peer` is than `over`; None where either has no measurement."""
    base, ours = results.get(over), results.get(peer)
    if not isinstance(base, Measurement) or not isinstance(ours, Measurement):
        return None
    ratio = metric.value(ours) / metric.value(base)
    return ratio if metric.higher_is_better else 1 / ratio


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header),
            *("| " + " | ".join(row) + " |" for row in rows)]


def _row_start(config: Config) -> list[str]:
    return [config.workload.name, str(config.batch), config.dtype]


def metric_table(runs: Runs, peers: Sequence[Peer], metric: Metric) -> list[str]:
    """A column per peer, then torch_graphfuse's speedup over each other peer (if it ran)."""
    ran_graphfuse = any(p.key == GRAPHFUSE for p in peers)
    others = [p for p in peers if p.key != GRAPHFUSE] if ran_graphfuse else []
    header = ["model", "batch", "dtype", *(p.label for p in peers),
              *(f"torch_graphfuse vs {p.short}" for p in others)]
    rows = []
    for config, results in runs.items():
        speedups = [speedup(results, metric, p.key) for p in others]
        rows.append([*_row_start(config),
                     *(_cell(results.get(p.key), lambda m: metric.fmt.format(metric.value(m)))
                       for p in peers),
                     *("-" if s is None else f"{s:.2f}x" for s in speedups)])
    return _table(header, rows)


def first_call_table(runs: Runs, peers: Sequence[Peer]) -> list[str]:
    header = ["model", "batch", "dtype", *(p.label for p in peers)]
    rows = [[*_row_start(config),
             *(_cell(results.get(p.key), lambda m: f"{m.first_s:.1f} s, {m.diff:.1e}")
               for p in peers)] for config, results in runs.items()]
    return _table(header, rows)


def note_lines(runs: Runs) -> list[str]:
    return [f"- {config.label}: {result.note}" for config, results in runs.items()
            if isinstance(result := results.get(GRAPHFUSE), Measurement)]


def failure_lines(runs: Runs, peers: Sequence[Peer]) -> list[str]:
    """The reasons in full: the cells shorten them."""
    return [f"- {config.label}, {p.label}: {result}" for config, results in runs.items()
            for p in peers if isinstance(result := results.get(p.key), str)]


def _cudnn_version(version: int) -> str:
    """cuDNN 9 encodes its version as major * 10000 + minor * 100 + patch."""
    return f"{version // 10000}.{version // 100 % 100}.{version % 100}"


def environment() -> str:
    """The GPU and the library versions, for the report's header."""
    try:
        import cudnn

        frontend = (f"frontend {cudnn.__version__} on cuDNN "
                    f"{_cudnn_version(cudnn.backend_version())}")
    except ImportError:
        frontend = "no cuDNN frontend (the cuda extra)"
    torch_cudnn = torch.backends.cudnn.version()
    return (f"GPU: {torch.cuda.get_device_name()}, torch {torch.__version__} (CUDA "
            f"{torch.version.cuda}, cuDNN {_cudnn_version(torch_cudnn) if torch_cudnn else '-'}"
            f"), torch_graphfuse's {frontend}")


def report(runs: Runs, peers: Sequence[Peer], header: str, command: str, quick: bool) -> str:
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    failures = failure_lines(runs, peers)
    return "\n".join([
        "# torch_graphfuse GPU benchmark" + (" (quick smoke run)" if quick else ""), "",
        f"{header}  ", f"Date: {date}  ", f"Command: `{command}`", "",
        "Each peer of each configuration ran in a process of its own. Model and inputs are "
        "cast to the dtype. Every peer runs with torch.backends.cudnn.benchmark on; both "
        "torch.compile peers with inductor's freezing, as TorchScript's peers are frozen. "
        "Latency: the median of calls each waited for (torch.cuda.synchronize, "
        "time.perf_counter). Throughput: calls issued back to back, one synchronize per round, "
        "the best round. Speedups are torch_graphfuse's, above 1x where it is faster. "
        "torch_graphfuse's cuDNN plans are chosen by cuDNN's heuristics"
        + (f" and timed ({plans.AUTOTUNE_ENV}=1)" if plans.autotune_enabled() else "") + ".",
        "",
        f"## {LATENCY.title}", "", *metric_table(runs, peers, LATENCY), "",
        f"## {THROUGHPUT.title}", "", *metric_table(runs, peers, THROUGHPUT), "",
        "## First call (s) and max abs diff against eager", "",
        "Building the peer and its first call: trace, freeze and profiling runs for "
        "TorchScript (torch_graphfuse from an empty plan cache), compilation for "
        "torch.compile. The diff is against eager in the same dtype.", "",
        *first_call_table(runs, peers), "",
        "## torch_graphfuse's cuDNN groups", "", *note_lines(runs), "",
        *(["## Failures", "", *failures, ""] if failures else []),
    ])


def plot(runs: Runs, peers: Sequence[Peer], path: Path, title: str) -> bool:
    """Each peer's speedup over eager, per configuration, in latency and in throughput;
    False where there is nothing to plot it with or against."""
    try:
        import matplotlib
    except ImportError:
        return False
    shown = [p for p in peers if p.key != "eager"]
    if not shown or "eager" not in {p.key for p in peers}:
        return False
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    width = 0.8 / len(shown)
    fig, axes = plt.subplots(2, 1, figsize=(max(6.0, 1.2 * len(runs)), 8.0), sharex=True)
    for ax, metric in zip(axes, (LATENCY, THROUGHPUT), strict=True):
        for i, peer in enumerate(shown):
            values = [speedup(results, metric, "eager", peer.key) or 0.0
                      for results in runs.values()]
            offset = (i - (len(shown) - 1) / 2) * width
            ax.bar([x + offset for x in range(len(runs))], values, width, label=peer.label)
        ax.axhline(1.0, color="black", linewidth=0.8, linestyle="--")
        ax.set_ylabel(f"speedup over eager, {metric.name.lower()}")
    axes[-1].set_xticks(range(len(runs)))
    axes[-1].set_xticklabels([c.label for c in runs], rotation=30, ha="right", fontsize=8)
    axes[0].set_title(title, fontsize=10)
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


# ---------------------------------------------------------------- main


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="Each peer of each configuration runs in a process of its own; one that fails "
               "or times out is a 'failed' cell.")
    parser.add_argument("--quick", action="store_true",
                        help="small stand-ins (ResNet-18 at 112, one BERT layer), batch 1 "
                             "unless --batches says otherwise, few iterations: a smoke run")
    parser.add_argument("--models", default="resnet50,bert",
                        help="comma-separated subset of resnet50,bert")
    parser.add_argument("--dtypes", default="fp16,bf16", help="comma-separated subset of fp16,bf16")
    parser.add_argument("--batches", default=None,
                        help="comma-separated batch sizes (default: 1,32; 1 with --quick)")
    parser.add_argument("--peers", default=",".join(PEERS_BY_KEY),
                        help=f"comma-separated subset of {','.join(PEERS_BY_KEY)}")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S, metavar="SECONDS",
                        help="per peer and configuration, compilation included "
                             f"(default {DEFAULT_TIMEOUT_S:g})")
    parser.add_argument("--out", type=Path, default=None,
                        help="output folder (default: benchmarks/, and *-quick files for --quick)")
    parser.add_argument("--one", metavar="MODEL,DTYPE,BATCH,PEER", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def _split(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def _batches(text: str | None, quick: bool) -> list[int]:
    if text is None:
        return list(QUICK_BATCHES if quick else BATCHES)
    try:
        batches = [int(part) for part in _split(text)]
    except ValueError:
        batches = []
    if not batches or min(batches) < 1:
        raise SystemExit(f"--batches takes positive integers, not {text!r}")
    return batches


def _summary(result: Result) -> str:
    if isinstance(result, str):
        return f"failed: {result}"
    return f"{result.latency_ms:.3f} ms, {result.throughput:.0f} samples/s"


def main(argv: Sequence[str]) -> None:
    args = parse_args(argv)
    if args.one:
        child(args.one, args.quick)
        return
    unknown = set(_split(args.peers)) - set(PEERS_BY_KEY)
    if unknown:
        raise SystemExit(f"unknown peers: {', '.join(sorted(unknown))}")
    peers = [p for p in PEERS if p.key in _split(args.peers)]
    todo = configs(_split(args.models), _split(args.dtypes), _batches(args.batches, args.quick),
                   args.quick)
    if not torch.cuda.is_available():
        raise SystemExit(
            f"gpu_bench.py needs a CUDA GPU: torch {torch.__version__} sees none (CUDA build: "
            f"{torch.version.cuda or 'no'}). Run it on a GPU machine with "
            "scripts/gpu_test.sh --bench, which installs a CUDA torch and the cuda extra.")
    suffix = "-quick" if args.quick and args.out is None else ""
    out = args.out or Path(__file__).resolve().parent
    out.mkdir(parents=True, exist_ok=True)
    results_path, plot_path = out / f"GPU_RESULTS{suffix}.md", out / f"gpu_speedup{suffix}.png"
    header = environment()
    command = " ".join(["python", *sys.argv])

    runs: Runs = {}
    jobs = [(config, peer) for config in todo for peer in peers]
    for i, (config, peer) in enumerate(jobs, 1):
        _progress(f"[{i}/{len(jobs)}] {config.label}, {peer.label}")
        start = time.perf_counter()
        result = run_child(child_command(config, peer, args.quick), args.timeout)
        runs.setdefault(config, {})[peer.key] = result
        _progress(f"  {_summary(result)} ({time.perf_counter() - start:.0f} s)")
        # Rewritten after every child: a run cut short keeps what it measured.
        results_path.write_text(report(runs, peers, header, command, args.quick))
    plotted = plot(runs, peers, plot_path, torch.cuda.get_device_name())
    _progress(f"wrote {results_path}" + (f" and {plot_path}" if plotted else
                                         " (no plot: needs matplotlib and the eager peer)"))


if __name__ == "__main__":
    main(sys.argv[1:])
