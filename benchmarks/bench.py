"""Side-by-side benchmark: torch_graphfuse against eager, frozen TorchScript, PyTorch's
built-in oneDNN Graph fuser, torch.compile (inductor) and torch_graphfuse through torch.compile
(backend "graphfuse"), on ResNet-50, BERT-base and an MLP, in fp32 and bf16 (autocast), in one
process with the same inputs and threads. int8 rows (ResNet-50, BERT-base): the models
statically quantized, torch_graphfuse against eager int8 PyTorch, torch.compile (inductor) of
the PT2E model, OpenVINO with NNCF, and torch_graphfuse's own fp32.

    python benchmarks/bench.py [--quick] [--models resnet50,bert,mlp] [--dtypes fp32,bf16,int8]
                               [--isas native,avx2] [--agreement N] [--out benchmarks]

--isas also runs every configuration under an emulated older ISA, in a child process whose
oneDNN and ATen are limited to its kernels (avx2: an AMD Zen 2/3 or Intel client CPU;
avx512_core: AVX-512 without VNNI or bf16). Emulation gives that CPU's kernels, not its speed:
its rows are labelled so.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import sys
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path

import torch
from harness.calls import Inputs
from harness.cli import comma_list, command_line, output_folder
from harness.cpu.ceilings import Ceilings
from harness.cpu.compare import Runs
from harness.cpu.configs import (
    DTYPE_NAMES,
    DTYPES,
    EMULATED_ISAS,
    FLOAT_DTYPES,
    INT8,
    NATIVE,
    Config,
    Workload,
    dtype_name,
)
from harness.cpu.first_call import first_call_child
from harness.cpu.peers import PEERS, PEERS_BY_KEY
from harness.cpu.report import plot, report, write_results
from harness.cpu.run import emulated_child, run_all, run_emulated
from harness.cpu.timing import Timing
from harness.text import progress

from torch_graphfuse.testing import quantize
from torch_graphfuse.testing.models import resnet18, resnet50
from torch_graphfuse.testing.transformer import bert_base, bert_inputs, bert_layer, mlp

BERT_SEQ = 128
MLP_SIZES = (1024, 4096, 4096, 1024)
AGREEMENT_SAMPLES = 200  # images for the int8 peers' top-1 agreement with the float model
AGREEMENT_SAMPLES_QUICK = 8


def _images(resolution: int) -> Callable[[int], Inputs]:
    return lambda batch: [torch.randn(batch, 3, resolution, resolution)]


def _bert_inputs(batch: int) -> Inputs:
    return list(bert_inputs(batch, BERT_SEQ, padding=BERT_SEQ // 8))


def _bert_flops(layers: int, hidden: int = 768, intermediate: int = 3072) -> Callable[[int], float]:
    """Per layer: 4 hidden x hidden and 2 hidden x intermediate linears per token, plus
    q @ k^T and probs @ v (seq x seq x hidden each) per sequence."""
    def flops(batch: int) -> float:
        tokens = batch * BERT_SEQ
        linear = 2 * tokens * (4 * hidden * hidden + 2 * hidden * intermediate)
        attention = 2 * 2 * batch * BERT_SEQ * BERT_SEQ * hidden
        return layers * (linear + attention)
    return flops


def _mlp_flops(batch: int) -> float:
    return 2 * batch * sum(a * b for a, b in itertools.pairwise(MLP_SIZES))


FULL = {
    "resnet50": Workload("ResNet-50 224", resnet50, _images(224), lambda b: 2 * 4.1e9 * b,
                         (1, 32), int8_batches=(1, 32), classifier=True),
    "bert": Workload(f"BERT-base s{BERT_SEQ}", bert_base, _bert_inputs, _bert_flops(12), (1, 8),
                     int8_batches=(1,), transformer=True),
    "mlp": Workload("MLP", lambda: mlp(MLP_SIZES), lambda b: [torch.randn(b, MLP_SIZES[0])],
                    _mlp_flops, (1, 32)),
}
QUICK = {  # small stand-ins, batch 1 only
    "resnet50": Workload("ResNet-18 112", resnet18, _images(112), lambda b: 2 * 1.82e9 / 4 * b,
                         (1,), int8_batches=(1,), classifier=True),
    "bert": Workload(f"BERT layer s{BERT_SEQ}", bert_layer, _bert_inputs, _bert_flops(1), (1,),
                     int8_batches=(1,), transformer=True),
    "mlp": dataclasses.replace(FULL["mlp"], batches=(1,)),
}


def configs(models: Sequence[str], quick: bool,
            dtypes: Sequence[str] = tuple(DTYPE_NAMES.values())) -> list[Config]:
    """Each model's fp32 and bf16 configurations, then its int8 ones, of the named dtypes."""
    workloads = QUICK if quick else FULL
    unknown = set(models) - set(workloads)
    if unknown:
        raise SystemExit(f"unknown models: {', '.join(sorted(unknown))}")
    unknown = set(dtypes) - set(DTYPE_NAMES.values())
    if unknown:
        raise SystemExit(f"unknown dtypes: {', '.join(sorted(unknown))}")
    todo = []
    for m in models:
        todo += [Config(m, workloads[m], batch, dtype) for batch in workloads[m].batches
                 for dtype in DTYPES if dtype_name(dtype) in dtypes]
        if "int8" in dtypes:
            todo += [Config(m, workloads[m], batch, INT8) for batch in workloads[m].int8_batches]
    return todo


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="small batch-1 stand-ins and few iterations (CI smoke run)")
    parser.add_argument("--models", default="resnet50,bert,mlp",
                        help="comma-separated subset of resnet50,bert,mlp")
    parser.add_argument("--dtypes", default=",".join(DTYPE_NAMES.values()),
                        help="comma-separated subset of fp32,bf16,int8 (int8: ResNet-50, BERT)")
    parser.add_argument("--agreement", type=int, default=None, metavar="N",
                        help="int8 ResNet rows: top-1 agreement with the float model over N "
                        f"synthetic images (default {AGREEMENT_SAMPLES}, "
                        f"{AGREEMENT_SAMPLES_QUICK} with --quick)")
    parser.add_argument("--out", type=Path, default=None,
                        help="output folder (default: benchmarks/, and *-quick files for --quick)")
    parser.add_argument("--isas", default=NATIVE,
                        help=f"comma-separated ISAs to run on: {NATIVE} (this CPU) and "
                        f"emulated {', '.join(EMULATED_ISAS)} (see the module's doc)")
    # internal: a child process run under an emulated ISA (see run_emulated)
    parser.add_argument("--isa-child", choices=list(EMULATED_ISAS), help=argparse.SUPPRESS)
    parser.add_argument("--json", type=Path, help=argparse.SUPPRESS)
    # internal: the fresh process that times one peer's first call (see first_calls)
    parser.add_argument("--first-call", choices=[p.key for p in PEERS if p.first_calls],
                        help=argparse.SUPPRESS)
    parser.add_argument("--batch", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--dtype", choices=list(FLOAT_DTYPES), help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def _without_isas(argv: Sequence[str]) -> list[str]:
    """argv less its --isas option (the parent runs each ISA itself)."""
    kept, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg == "--isas":
            skip = True
        elif not arg.startswith("--isas="):
            kept.append(arg)
    return kept


def main(argv: Sequence[str]) -> None:
    args = parse_args(argv)
    if args.first_call:
        config, = (c for c in configs([args.models], args.quick)
                   if c.batch == args.batch and c.dtype == FLOAT_DTYPES[args.dtype])
        first_call_child(config, PEERS_BY_KEY[args.first_call])
        return
    todo = configs(comma_list(args.models), args.quick, comma_list(args.dtypes))
    samples = args.agreement or (AGREEMENT_SAMPLES_QUICK if args.quick else AGREEMENT_SAMPLES)
    timing = Timing(2, 10, 2.0) if args.quick else Timing(3, 20, 20.0)
    torch._C._jit_set_autocast_mode(False)
    for message in quantize.DEPRECATIONS:  # the FX int8 models warn as they run
        warnings.filterwarnings("ignore", message=message)
    if args.isa_child:
        emulated_child(todo, timing, args.quick, samples, __file__, args.json)
        return
    isas = comma_list(args.isas)
    unknown = set(isas) - {NATIVE, *EMULATED_ISAS}
    if unknown:
        raise SystemExit(f"unknown ISAs: {', '.join(sorted(unknown))}")
    out, suffix = output_folder(args.out, args.quick, Path(__file__).resolve().parent)

    runs: Runs = {}
    gemms: dict[str, Sequence[dict[str, Ceilings]]] = {}
    overhead = None
    for isa in isas:
        if isa == NATIVE:
            native, gemms[isa], overhead = run_all(todo, timing, args.quick, samples, __file__)
            runs.update(native)
        else:
            emulated, gemms[isa] = run_emulated(isa, _without_isas(argv),
                                                QUICK if args.quick else FULL, __file__)
            runs.update(emulated)

    results = out / f"RESULTS{suffix}.md"
    write_results(results, report(runs, gemms, overhead, command_line(), args.quick, samples))
    plot(runs, out / f"speedup{suffix}.png")
    progress(f"wrote {results} and {out / f'speedup{suffix}.png'}")


if __name__ == "__main__":
    main(sys.argv[1:])
