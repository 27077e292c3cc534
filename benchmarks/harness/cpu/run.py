"""A whole CPU benchmark run: every configuration between two GEMM measurements, natively in
this process or in a child process limited to an emulated ISA's kernels."""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from torch_graphfuse.backends.onednn import library

from ..children import json_child
from ..text import failure, progress
from .ceilings import Ceilings, Overhead, chain_overhead, gemm_gflops
from .compare import Comparison, Measurement, Result, Runs, compare
from .configs import (
    DTYPE_NAMES,
    EMULATED_ISAS,
    INT8,
    Config,
    Workload,
    dtype_name,
    model_and_inputs,
)
from .first_call import first_calls
from .int8 import INT8_PEERS, run_int8_config
from .peers import PEERS
from .timing import StallProbe, Timing

Gemms = list[dict[str, Ceilings]]  # GEMM rates at the start and at the end of a run


def _runnable(todo: Sequence[Config]) -> list[Config]:
    """The configurations worth running on this CPU: without bf16 instructions, the bf16
    ones at each model's smallest batch only. There eager's bf16 convolutions fall back to
    ATen's scalar path (2.8 s per ResNet-50 image on emulated AVX2), so a larger batch takes
    hours; the smallest one shows the same."""
    isa = library.isa()
    if isa is None or isa.bf16:
        return list(todo)
    smallest = {c.model: min(c.workload.batches) for c in todo}
    kept = [c for c in todo if c.dtype != torch.bfloat16 or c.batch == smallest[c.model]]
    for c in todo:
        if c not in kept:
            progress(f"{c.label}: not run, {isa.name} has no bf16 instructions (the smallest "
                     "batch stands for it)")
    return kept


def run_config(config: Config, timing: Timing, probe: StallProbe, quick: bool, script: str,
               first: bool = True) -> Comparison:
    """The float peers on one configuration; with `first`, their first calls too, in fresh
    processes of `script`."""
    model, inputs = model_and_inputs(config)
    comparison = compare(model, inputs, config.dtype, PEERS, timing, probe, config.label)
    del model, inputs
    if not first:
        return comparison
    first_ms = first_calls(config, quick, probe, script)
    progress(f"  {config.label} | first call ms: " + ", ".join(
        f"{key} {ms if isinstance(ms, str) else f'{ms:.0f}'}" for key, ms in first_ms.items()))
    return dataclasses.replace(comparison, first_ms=first_ms)


def run_all(todo: Sequence[Config], timing: Timing, quick: bool, samples: int, script: str,
            first: bool = True) -> tuple[Runs, Gemms, Overhead | None]:
    """Every configuration in this process, between two GEMM measurements; with `first`,
    the first-call times in fresh processes of `script` too."""
    probe = StallProbe()
    gemms = [gemm_gflops(probe)]
    runs: Runs = {}
    todo = _runnable(todo)
    for i, config in enumerate(todo, 1):
        progress(f"[{i}/{len(todo)}] {config.label}")
        if config.dtype != INT8:
            runs[config] = run_config(config, timing, probe, quick, script, first)
            continue
        try:
            runs[config] = run_int8_config(config, timing, probe, quick, samples)
        except Exception as error:  # quantizing failed: every int8 peer reports why
            progress(f"  {config.label} | quantization failed: {failure(error)}")
            runs[config] = Comparison({p.key: f"quantization: {failure(error)}"
                                       for p in INT8_PEERS}, {}, 0, 0)
    try:
        overhead: Overhead | None = chain_overhead(timing, probe)
    except Exception as error:  # left out of the report, never ends the run
        progress(f"per-group overhead: failed: {failure(error)}")
        overhead = None
    gemms.append(gemm_gflops(probe))
    return runs, gemms, overhead


def _encode(runs: Runs, gemms: Gemms) -> dict[str, Any]:
    def result(r: Result) -> Any:
        return r if isinstance(r, str) else dataclasses.asdict(r)

    return {
        "runs": [{"model": c.model, "batch": c.batch, "dtype": dtype_name(c.dtype),
                  "results": {k: result(r) for k, r in run.results.items()},
                  "first_ms": run.first_ms, "rounds": run.rounds, "stalled": run.stalled}
                 for c, run in runs.items()],
        "gemms": [{name: {dtype_name(d): v for d, v in c.items()} for name, c in g.items()}
                  for g in gemms]}


def _decode(data: dict[str, Any], isa: str,
            workloads: Mapping[str, Workload]) -> tuple[Runs, Gemms]:
    dtypes = {name: d for d, name in DTYPE_NAMES.items()}
    runs: Runs = {}
    for r in data["runs"]:
        config = Config(r["model"], workloads[r["model"]], r["batch"], dtypes[r["dtype"]], isa)
        results = {k: v if isinstance(v, str) else Measurement(**v)
                   for k, v in r["results"].items()}
        runs[config] = Comparison(results, r["first_ms"], r["rounds"], r["stalled"])
    gemms = [{name: {dtypes[d]: v for d, v in c.items()} for name, c in g.items()}
             for g in data["gemms"]]
    return runs, gemms


def run_emulated(isa: str, argv: Sequence[str], workloads: Mapping[str, Workload],
                 script: str) -> tuple[Runs, Gemms]:
    """The same configurations in a child process of `script` (with `argv` and --isa-child)
    limited to an older ISA's kernels."""
    progress(f"on emulated {isa}: a child process with "
             + " ".join(f"{k}={v}" for k, v in EMULATED_ISAS[isa].items()))
    data = json_child(lambda path: [sys.executable, script, *argv, "--isa-child", isa,
                                    "--json", str(path)],
                      env={**os.environ, **EMULATED_ISAS[isa]})
    return _decode(data, isa, workloads)


def emulated_child(todo: Sequence[Config], timing: Timing, quick: bool, samples: int,
                   script: str, path: Path) -> None:
    """The child process of run_emulated: the run, written to `path`. First calls are
    measured natively only: emulation approximates speed."""
    runs, gemms, _ = run_all(todo, timing, quick, samples, script, first=False)
    path.write_text(json.dumps(_encode(runs, gemms)))
