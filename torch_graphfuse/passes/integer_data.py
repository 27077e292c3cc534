"""Integer data: the floating-point values a graph computes from integer tensors alone
(positions, lengths, distances: `arange`, an int64 tensor cast to float) with numbers.

Such a value is typically turned back into integers (T5's relative-position buckets:
`log(d / 8) / log(16) * 8` then `.long()`) or compared, so its exact value decides the
result, and eager's value sits on whole numbers there: log(32 / 8) / log(16) * 8 is 4.0.
oneDNN's Log, exp and friends round otherwise than ATen's (its Log after a division is
3.4e-6 off), which put 544 of 16,384 of T5's bias entries a bucket low. These ops are
cheap: op mapping leaves every node whose result is integer data with ATen.

A floating-point tensor is integer data when it is
- the result of `arange`, or of a cast of an integer or bool tensor, or
- the result of an op whose tensor inputs are all integer data, integer tensors, or
  constants of one element (the numbers prepare_binary turned into tensors), one of them
  integer data.
"""

from __future__ import annotations

import torch

from .. import log
from .graph_utils import all_nodes, profiled_dtype

NAME = log.module_name(__file__)

_FLOATING = (torch.float32, torch.float64, torch.float16, torch.bfloat16)
_CASTS = frozenset({"aten::to", "aten::type_as", "aten::_to_copy", "aten::float"})


def _scalar_constant(value: torch._C.Value) -> bool:
    if value.node().kind() != "prim::Constant":
        return False
    if not isinstance(value.type(), torch._C.TensorType):
        return True
    tensor = value.toIValue()
    return isinstance(tensor, torch.Tensor) and tensor.numel() <= 1


def analyze(graph: torch._C.Graph) -> frozenset[int]:
    """Ids of the floating-point values that are integer data."""
    derived: set[int] = set()
    for node in all_nodes(graph.block()):
        outputs = [v for v in node.outputs() if profiled_dtype(v) in _FLOATING]
        if not outputs:
            continue
        tensors = [v for v in node.inputs() if isinstance(v.type(), torch._C.TensorType)]
        integer = {v.unique() for v in tensors
                   if profiled_dtype(v) is not None and not profiled_dtype(v).is_floating_point}
        if node.kind() == "aten::arange" or (node.kind() in _CASTS and tensors
                                              and tensors[0].unique() in integer):
            derived.update(v.unique() for v in outputs)
            continue
        if not any(v.unique() in derived for v in tensors):
            continue
        if all(v.unique() in derived or v.unique() in integer or _scalar_constant(v)
               for v in tensors):
            derived.update(v.unique() for v in outputs)
    log.debug(NAME, lambda: f"{len(derived)} values are integer data")
    return frozenset(derived)
