"""The CLI, `python -m torch_graphfuse.testing.fuzz` (long mode).

Runs graphs in worker processes, prints failures as they come and a summary
by cause, minimizes some failures of each cause; `--index` runs one graph in
this process and prints it. Exit status 1 on a plugin failure.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from torch_graphfuse.testing import fuzz
from torch_graphfuse.testing.fuzz.describe import describe
from torch_graphfuse.testing.fuzz.execute import check
from torch_graphfuse.testing.fuzz.longrun import Pool, Report, Task, backend, case_for
from torch_graphfuse.testing.fuzz.summary import Summary


def _tasks(args: argparse.Namespace) -> list[Task]:
    dtypes = ["fp32", "bf16"] if args.dtype == "both" else [args.dtype]
    indices = [args.index] if args.index is not None else \
        range(args.start, args.start + args.graphs)
    return [Task(i, dtypes[i % len(dtypes)], args.seed, backend=args.backend,
                 quantized=args.quantized, anchor=args.anchor, sizes=args.sizes)
            for i in indices]


def _single(task: Task) -> int:
    """--index: one graph in this process, everything printed."""
    case = case_for(task)
    print(describe(case))
    with backend(task.backend):
        r = check(case)
    print(f"status: {r.status}, {r.groups} fusion groups {r.reason}")
    for p in r.problems:
        print(f"plugin: {p}")
    for p in r.torchscript:
        print(f"torchscript too: {p}")
    for w in r.warnings:
        print(f"plugin warning: {w}")
    return 1 if r.status == "plugin" else 0


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m torch_graphfuse.testing.fuzz",
                                 description=fuzz.__doc__.split("\n\n")[0])
    ap.add_argument("--graphs", type=int, default=300)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dtype", choices=["fp32", "bf16", "both"], default=None,
                    help="default both (fp32 with --quantized)")
    ap.add_argument("--quantized", action="store_true",
                    help="int8 programs in PT2E's form (quantize/dequantize ops), fp32 only; "
                         "verdict within the error bound of torch_graphfuse.testing.fuzz.quantized")
    ap.add_argument("--backend", choices=["onednn", "cudnn"], default="onednn",
                    help="cudnn: the cuDNN partitioner and lowering, run on CPU by the IR's "
                         "reference interpreter")
    ap.add_argument("--anchor", choices=sorted(fuzz.FOCUSED_ANCHORS),
                    help="start every graph with this block (attention: multi-head attention "
                         "with every mask form)")
    ap.add_argument("--sizes", type=int, default=0,
                    help="call each graph at this many further sizes after its second shape "
                         "(batch sizes, lengths, image sizes: a serving stream)")
    ap.add_argument("--jobs", type=int, default=1, help="worker processes")
    ap.add_argument("--start", type=int, default=0, help="first graph index")
    ap.add_argument("--index", type=int, help="run one graph here and print it")
    ap.add_argument("--minimize", type=int, default=2, help="graphs minimized per cause")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds per graph")
    ap.add_argument("--recycle", type=int, default=300, help="graphs per worker process")
    args = ap.parse_args(argv)
    if args.quantized and args.dtype not in (None, "fp32"):
        ap.error("--quantized runs fp32 graphs only")
    args.dtype = args.dtype or ("fp32" if args.quantized else "both")
    if args.index is not None:
        return _single(_tasks(args)[0])
    tasks = _tasks(args)
    summary = Summary(args.seed, args.anchor)
    pool = Pool(args.jobs, args.timeout, args.recycle)
    every = max(1, min(50, len(tasks) // 20))

    def on_report(r: Report) -> None:
        summary.add(r)
        if r.status == "plugin":
            print(f"FAIL graph {r.index} ({r.dtype}) [{r.cause}] {(r.problems or [''])[0][:150]}",
                  flush=True)
        if len(summary.reports) % every == 0:
            print(summary.progress(len(tasks)), flush=True)
    try:
        pool.run(tasks, on_report)
        minimized = _minimize_some(pool, summary, args.minimize, args.backend, args.anchor,
                                   args.sizes)
    finally:
        pool.close()
    print(summary.render(minimized))
    return 1 if summary.count("plugin") else 0


def _minimize_some(pool: Pool, summary: Summary, per_cause: int, backend: str,
                   anchor: str | None, sizes: int) -> dict[tuple[str, int], str]:
    """Minimize the first `per_cause` failures of each cause (not crashes: each
    candidate would take a worker down)."""
    tasks = [Task(r.index, "fp32" if r.dtype == "int8" else r.dtype, summary.seed, cause,
                  backend, quantized=r.dtype == "int8", anchor=anchor, sizes=sizes)
             for cause, group in summary.failures().items()
             for r in [r for r in group if not r.crashed][:per_cause]]
    found: dict[tuple[str, int], str] = {}
    if tasks:
        print(f"minimizing {len(tasks)} failures...", flush=True)
    pool.run(tasks, lambda r: found.__setitem__((r.dtype, r.index), r.minimized))
    return found


if __name__ == "__main__":
    sys.exit(main())
