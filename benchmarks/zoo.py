"""The zoo benchmark: the architectures of torch_graphfuse.testing.zoo (transformers, timm and
torchvision at their published sizes, batch 1, random weights) with bench.py's peers side by
side in one process: correctness against eager, the share of aten ops fused with the top
reasons the rest stayed with ATen, and latency. Writes the Zoo section of RESULTS.md (the rest
of the file is bench.py's) and zoo.png.

    python benchmarks/zoo.py [--models hf/bert,timm/resnet50] [--dtypes fp32,bf16]
                             [--rounds N] [--small] [--wider] [--out benchmarks]
                             [--limit SECONDS] [--build-limit SECONDS]

--wider runs the wider list instead (torch_graphfuse.testing.wider_zoo: 86 more architectures,
run outside CI) and writes RESULTS_wider.md and wider.png; --models may name models of both.

--small runs the zoo's small configurations (the test slice's), for a quick look. A peer whose
build takes over --build-limit seconds (inductor on Hugging Face's Swin) shows as `stopped` in
its model's row; a model whose process passes --limit is listed as not run.
"""

from __future__ import annotations

import argparse
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path

import torch
from harness.cli import comma_list, zoo_models
from harness.cpu.zoo_runs import ZooRun, plot, run_in_child, section, write_section, zoo_child
from harness.text import progress

from torch_graphfuse.testing import wider_zoo, zoo


def main(argv: Sequence[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", help="zoo names (default: the whole zoo, or wider list)")
    parser.add_argument("--dtypes", default="fp32", help="fp32,bf16")
    parser.add_argument("--rounds", type=int, default=10, help="measured rounds per model")
    parser.add_argument("--small", action="store_true", help="the small configurations")
    parser.add_argument("--wider", action="store_true",
                        help="the wider list: RESULTS_wider.md and wider.png")
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent)
    parser.add_argument("--limit", type=float, default=1200.0,
                        help="seconds per model and dtype (its own process) before it is stopped")
    parser.add_argument("--build-limit", type=float, default=300.0,
                        help="seconds a peer's build may take before that peer is left out")
    parser.add_argument("--child", help=argparse.SUPPRESS)  # "<model> <dtype> <json path>"
    args = parser.parse_args(argv)
    names = zoo_models(args.models or ",".join(wider_zoo.MODELS if args.wider else zoo.MODELS))
    torch._C._jit_set_autocast_mode(False)
    warnings.filterwarnings("ignore")  # the libraries' deprecation notices, per model
    if args.child:
        name, dtype, path = args.child.split(" ")
        zoo_child(name, dtype, args.small, args.rounds, Path(path), args.build_limit)
        return
    args.out.mkdir(parents=True, exist_ok=True)
    command = " ".join(["python", "benchmarks/zoo.py", *argv])
    results, picture = ("RESULTS_wider.md", "wider.png") if args.wider else \
        ("RESULTS.md", "zoo.png")
    runs: list[ZooRun] = []
    failures: list[str] = []
    for i, name in enumerate(names, 1):
        for dtype in comma_list(args.dtypes):
            progress(f"[{i}/{len(names)}] {name} {dtype}")
            run = run_in_child(name, dtype, argv, args.limit, __file__)
            if isinstance(run, str):  # a model that cannot run is reported, not fatal
                failures.append(f"{name} {dtype}: {run}")
                progress(f"  failed: {failures[-1]}")
            else:
                runs.append(run)
        # After every model, so that an interrupted run leaves what it measured.
        write_section(args.out / results, section(runs, failures, command, args.small))
        if runs:
            plot(runs, args.out / picture)
    progress(f"wrote the Zoo section of {args.out / results} and {args.out / picture}")


if __name__ == "__main__":
    main(sys.argv[1:])
