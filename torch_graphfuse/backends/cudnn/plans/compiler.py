"""Plans made by cuDNN through the frontend's Python API (imported on first use).

A plan is chosen by cuDNN's heuristics (mode A, then FALLBACK: the first plan of
that list that builds) or, with TORCH_GRAPHFUSE_CUDNN_AUTOTUNE=1, by timing the
first AUTOTUNE_TOP_K of that list on the device. The engines the group's
precision rules out (key.deselected_notes) and those that failed to execute
before are deselected first.
"""

from __future__ import annotations

from typing import Any

from .... import config, log
from .. import builder, device_specs, ir
from ..frontend import load_cudnn
from ..ir import TORCH_DTYPES
from .cache import Compiled
from .key import deselected_notes
from .store import NAME, StoredPlan

AUTOTUNE_ENV = config.CUDNN_AUTOTUNE.env
AUTOTUNE_TOP_K = 8
AUTOTUNE_RUNS = 5


def autotune_enabled() -> bool:
    return config.value(config.CUDNN_AUTOTUNE) != "0"


class CudnnCompiler:
    """Plans made by cuDNN.

    `device` (a device_specs.DEVICES name) plans for a described GPU instead of the
    handle's: cuDNN's deviceless mode, where plans build and (de)serialize with no
    GPU present but never run."""

    def __init__(self, device: str | None = None) -> None:
        self.device = device

    def build(self, graph: ir.Graph, handle: Any, autotune: bool, tf32: bool,
              failed_engines: frozenset[str] = frozenset()
              ) -> tuple[Compiled, bytes | None]:
        cudnn = load_cudnn()
        fe = builder.build(graph, handle=handle, device=self.device).graph
        notes = deselected_notes(graph, tf32)
        fe.deselect_numeric_notes([getattr(cudnn.numerical_note, n) for n in notes])
        if failed_engines:
            fe.deselect_engines(sorted(failed_engines))
        fe.validate()
        fe.build_operation_graph()
        fe.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
        try:
            fe.check_support()
        except Exception as error:
            if "TENSOR_CORE" in notes:
                raise RuntimeError(
                    "cuDNN offers no plan that computes this fp32 group without TF32, and "
                    "TF32 is off for it (torch.backends.cuda.matmul.allow_tf32 for a matmul, "
                    f"torch.backends.cudnn.allow_tf32 for a convolution): {error}") from error
            raise
        index = _select_fastest(fe, graph, handle) if autotune else _build_first(fe)
        try:
            engine_id, knobs = fe.get_engine_and_knobs_at_index(index)
            config: list[Any] | None = [int(engine_id), {str(k): int(v) for k, v in knobs.items()}]
        except Exception:  # a plan the backend chose among candidates it does not expose
            config = None
        uids = {tid: builder.uid(tid) for tid in (*graph.inputs, *graph.outputs)}
        compiled = Compiled(fe, uids, int(fe.get_workspace_size()), autotune,
                            fe.get_plan_name_at_index(index), failed_engines, config)
        try:
            payload: bytes | None = bytes(fe.serialize(as_bytes=True))
        except Exception as error:  # the plan runs; only the disk cache goes without it
            log.debug(NAME, f"plan not serializable, not kept on disk: {error}")
            payload = None
        return compiled, payload

    def load(self, stored: StoredPlan, handle: Any) -> Compiled:
        cudnn = load_cudnn()
        options = ({} if self.device is None
                   else {"device_property": device_specs.device_properties(self.device)})
        fe = cudnn.pygraph(handle=handle, **options)
        fe.deserialize(handle, stored.payload)
        uids = {int(tid): int(uid) for tid, uid in stored.meta["uids"]}
        return Compiled(fe, uids, int(fe.get_workspace_size()),
                        bool(stored.meta.get("autotuned")), str(stored.meta.get("engine", "")),
                        frozenset(stored.meta.get("failed_engines", ())),
                        stored.meta.get("engine_config"))


def _build_first(fe: Any) -> int:
    """Build the first plan of the heuristics' list that builds; its index."""
    errors = []
    for index in range(fe.get_execution_plan_count()):
        try:
            fe.select_plan(index)
            fe.build_plans()
        except Exception as error:  # deselected, or cuDNN declines to build it
            errors.append(f"plan {index}: {error}")
            continue
        return index
    raise RuntimeError("no plan of the heuristics' list builds: " + "; ".join(errors))


def _select_fastest(fe: Any, graph: ir.Graph, handle: Any) -> int:
    """Time the first AUTOTUNE_TOP_K plans on random inputs on the handle's stream
    (torch's current one), build the fastest and give its index; plans that fail
    are skipped."""
    import torch

    cudnn = load_cudnn()
    device = torch.device("cuda", torch.cuda.current_device())
    pack = {}
    for t in graph.tensors:
        if not t.virtual:
            buffer = torch.empty_strided(t.dims, t.strides, dtype=TORCH_DTYPES[t.dtype],
                                         device=device)
            pack[builder.uid(t.id)] = buffer.normal_() if t.id in graph.inputs else buffer
    declines = (cudnn.cudnnGraphNotSupportedError, NotImplementedError, RuntimeError)
    best: tuple[float, int] | None = None
    for index in range(min(fe.get_execution_plan_count(), AUTOTUNE_TOP_K)):
        try:
            fe.build_plan_at_index(index)
            workspace = torch.empty(fe.get_workspace_size_plan_at_index(index),
                                    dtype=torch.uint8, device=device)
            fe.execute_plan_at_index(pack, workspace, index, handle)  # warm-up
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(AUTOTUNE_RUNS):
                fe.execute_plan_at_index(pack, workspace, index, handle)
            end.record()
            end.synchronize()
        except declines as error:
            log.debug(NAME, f"autotune: plan {index} skipped: {error}")
            continue
        ms = start.elapsed_time(end) / AUTOTUNE_RUNS
        log.debug(NAME, f"autotune: plan {index} {fe.get_plan_name_at_index(index)}: {ms:.4f} ms")
        if best is None or ms < best[0]:
            best = (ms, index)
    if best is None:
        raise RuntimeError("autotune: no plan of the heuristics' list could run")
    fe.select_plan(best[1])
    fe.build_plans()
    return best[1]
