"""What a plan is valid for, and the precision that picks its engines.

A plan is valid only for the graph, GPU, library and precision it was built for:
PlanKey holds the IR's fingerprint, the device's name, SM version and SM count,
the cuDNN and frontend versions, and whether TF32 is allowed. Both caches (memory
and disk) are keyed by it.

Precision follows eager: engines that down-convert their inputs are never chosen,
and an fp32 group runs on tensor cores (TF32) only where eager would,
torch.backends.cudnn.allow_tf32 for a convolution and
torch.backends.cuda.matmul.allow_tf32 for a matmul.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from typing import Any

from .. import ir
from ..frontend import load_cudnn


@dataclass(frozen=True)
class PlanKey:
    """What a plan is valid for."""

    ir_fingerprint: str
    device_name: str
    sm_version: int
    sm_count: int
    cudnn_version: int
    frontend_version: str
    tf32: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def digest(self) -> str:
        return hashlib.sha256(json.dumps(self.to_dict(), sort_keys=True).encode()).hexdigest()


def device_key(graph: ir.Graph, device_index: int) -> PlanKey:
    """The key of `graph`'s plan on CUDA device `device_index` with the installed cuDNN
    and torch's TF32 settings as they are now."""
    import torch

    cudnn = load_cudnn()
    props = torch.cuda.get_device_properties(device_index)
    return PlanKey(graph.fingerprint(), props.name, props.major * 10 + props.minor,
                   props.multi_processor_count, int(cudnn.backend_version()), cudnn.__version__,
                   tf32_allowed(graph))


# Which of torch's flags decides TF32 for a group (the C++ executor reads the same).
TF32_NEVER, TF32_CUDNN_FLAG, TF32_MATMUL_FLAG = 0, 1, 2


def tf32_flag(graph: ir.Graph) -> int:
    """The flag eager follows for this group's anchor: none outside fp32; for a
    convolution torch.backends.cudnn.allow_tf32 (on by default), for a matmul
    torch.backends.cuda.matmul.allow_tf32 (off by default)."""
    if graph.io_dtype != "float":
        return TF32_NEVER
    if any(node.op == "conv_fprop" for node in graph.nodes):
        return TF32_CUDNN_FLAG
    return TF32_MATMUL_FLAG


def tf32_allowed(graph: ir.Graph) -> bool:
    """Whether eager would run this group's anchor in TF32 now (tf32_flag's flag)."""
    import torch

    flag = tf32_flag(graph)
    if flag == TF32_CUDNN_FLAG:
        return bool(torch.backends.cudnn.allow_tf32)
    return flag == TF32_MATMUL_FLAG and bool(torch.backends.cuda.matmul.allow_tf32)


def deselected_notes(graph: ir.Graph, tf32: bool) -> list[str]:
    """The numerical notes (cudnn.numerical_note names) of the engines this group must
    not run on: inputs down-converted to a narrower type, as eager never does, and, for
    an fp32 group where TF32 is not allowed, tensor cores (fp32 on tensor cores is TF32)."""
    notes = ["DOWN_CONVERT_INPUTS"]
    if graph.io_dtype == "float" and not tf32:
        notes.append("TENSOR_CORE")
    return notes
