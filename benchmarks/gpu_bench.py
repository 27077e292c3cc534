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

With TORCH_GRAPHFUSE_CUDNN_NATIVE=1 in the environment, the plugin's groups run their plans
from C++ (backends/cudnn/runtime.py); its groups' note says which executor ran them.

Writes GPU_RESULTS.md and gpu_speedup.png into benchmarks/ (GPU_RESULTS-quick.md and
gpu_speedup-quick.png for --quick). Needs a CUDA GPU and the cuda extra: run it through
scripts/gpu_test.sh --bench on a GPU machine.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import torch
from harness.calls import Inputs
from harness.children import run_child
from harness.cli import comma_list, command_line, output_folder
from harness.gpu.configs import DTYPES, Config, Workload
from harness.gpu.peers import PEERS, PEERS_BY_KEY, Peer
from harness.gpu.report import Runs, environment, plot, report
from harness.gpu.timing import Measurement, Result, job_child
from harness.text import progress

from torch_graphfuse.testing.models import resnet18, resnet50
from torch_graphfuse.testing.transformer import additive_mask, bert_base, bert_layer

BERT_SEQ = 128
BATCHES = (1, 32)
QUICK_BATCHES = (1,)
DEFAULT_TIMEOUT_S = 1800.0  # per child: max-autotune takes minutes over ResNet-50's convolutions


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


def configs(models: Sequence[str], dtypes: Sequence[str], batches: Sequence[int],
            quick: bool) -> list[Config]:
    """Model by model, then dtype, then batch: the report's row order."""
    workloads = QUICK if quick else FULL
    unknown = (set(models) - set(workloads)) | (set(dtypes) - set(DTYPES))
    if unknown:
        raise SystemExit(f"unknown models or dtypes: {', '.join(sorted(unknown))}")
    return [Config(m, workloads[m], batch, d) for m in models for d in dtypes for batch in batches]


def job_spec(config: Config, peer: Peer) -> str:
    return f"{config.model},{config.dtype},{config.batch},{peer.key}"


def parse_spec(spec: str, quick: bool) -> tuple[Config, Peer]:
    try:
        model, dtype, batch, peer = spec.split(",")
        return configs([model], [dtype], [int(batch)], quick)[0], PEERS_BY_KEY[peer]
    except (ValueError, KeyError):
        raise SystemExit(f"--one takes MODEL,DTYPE,BATCH,PEER, not {spec!r}") from None


def child_command(config: Config, peer: Peer, quick: bool) -> list[str]:
    return [sys.executable, str(Path(__file__).resolve()), "--one", job_spec(config, peer),
            *(["--quick"] if quick else [])]


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


def _batches(text: str | None, quick: bool) -> list[int]:
    if text is None:
        return list(QUICK_BATCHES if quick else BATCHES)
    try:
        batches = [int(part) for part in comma_list(text)]
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
        job_child(*parse_spec(args.one, args.quick), args.quick)
        return
    unknown = set(comma_list(args.peers)) - set(PEERS_BY_KEY)
    if unknown:
        raise SystemExit(f"unknown peers: {', '.join(sorted(unknown))}")
    peers = [p for p in PEERS if p.key in comma_list(args.peers)]
    todo = configs(comma_list(args.models), comma_list(args.dtypes),
                   _batches(args.batches, args.quick), args.quick)
    if not torch.cuda.is_available():
        raise SystemExit(
            f"gpu_bench.py needs a CUDA GPU: torch {torch.__version__} sees none (CUDA build: "
            f"{torch.version.cuda or 'no'}). Run it on a GPU machine with "
            "scripts/gpu_test.sh --bench, which installs a CUDA torch and the cuda extra.")
    out, suffix = output_folder(args.out, args.quick, Path(__file__).resolve().parent)
    results_path, plot_path = out / f"GPU_RESULTS{suffix}.md", out / f"gpu_speedup{suffix}.png"
    header = environment()
    command = command_line()

    runs: Runs = {}
    jobs = [(config, peer) for config in todo for peer in peers]
    for i, (config, peer) in enumerate(jobs, 1):
        progress(f"[{i}/{len(jobs)}] {config.label}, {peer.label}")
        start = time.perf_counter()
        result = run_child(child_command(config, peer, args.quick), args.timeout, Measurement)
        runs.setdefault(config, {})[peer.key] = result
        progress(f"  {_summary(result)} ({time.perf_counter() - start:.0f} s)")
        # Rewritten after every child: a run cut short keeps what it measured.
        results_path.write_text(report(runs, peers, header, command, args.quick))
    plotted = plot(runs, peers, plot_path, torch.cuda.get_device_name())
    progress(f"wrote {results_path}" + (f" and {plot_path}" if plotted else
                                        " (no plot: needs matplotlib and the eager peer)"))


if __name__ == "__main__":
    main(sys.argv[1:])
