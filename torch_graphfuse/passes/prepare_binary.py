"""Binary preparation: make add/sub/mul/div mappable one to one.

- `x * 1`, `x / 1`, `x - 0` are removed when the result has x's type and the
  removal cannot be seen: x is not (an alias of) a graph input, the result not
  (an alias of) a graph output, and nothing writes to either in place. (`x + 0`
  stays: it turns -0.0 into +0.0.)
- `add(x, y, alpha)` / `sub(x, y, alpha)` with alpha != 1 become
  `add(x, mul(y, alpha))`.
- A Python-number operand becomes a constant 0-dim tensor of the result's
  dtype (unless the number overflows there, where ATen keeps it in float32), so
  the op maps to a oneDNN binary op with numpy broadcasting. 0-dim keeps torch's
  type promotion in the unfused fallback: a 0-dim tensor, like a number, does
  not promote a dimensioned operand.
- A tensor operand of another dtype than the result (a bf16 result of autocast
  meeting an f32 residual) is cast first by an explicit `aten::to`, as torch's
  promotion does inside the op: oneDNN may then fuse the cast into the
  producer and the op into what follows, each where its patterns allow.
"""

from __future__ import annotations

import math
import numbers

import torch

from ..aten_ops import BINARY_ARITHMETIC, FUSION_DTYPES
from .graph_utils import all_nodes, constant_number, insert_cast

_IDENTITY = {"aten::sub": 0, "aten::mul": 1, "aten::div": 1}


def _result_dtype(node: torch._C.Node) -> torch.dtype | None:
    t = node.output().type()
    if not isinstance(t, torch._C.TensorType) or t.dtype() not in FUSION_DTYPES:
        return None
    # A CUDA graph goes to cuDNN, which takes a number as a pointwise scalar in
    # float, as eager on CUDA does (backends/cudnn/op_table).
    device = t.device()
    return None if device is not None and device.type != "cpu" else t.dtype()


def _alpha(node: torch._C.Node) -> numbers.Number | None:
    if node.kind() in ("aten::add", "aten::sub") and node.inputsSize() == 3:
        return constant_number(node.inputsAt(2))
    return 1


def _is_identity(node: torch._C.Node) -> bool:
    other = constant_number(node.inputsAt(1))
    if (node.kind() not in _IDENTITY or other is None or other != _IDENTITY[node.kind()]
            or _alpha(node) != 1):
        return False
    rounding = node.inputsAt(2) if node.inputsSize() > 2 else None
    if node.kind() == "aten::div" and rounding is not None and not rounding.node().mustBeNone():
        return False
    x, out = node.inputsAt(0).type(), node.output().type()
    return (isinstance(x, torch._C.TensorType) and isinstance(out, torch._C.TensorType)
            and x.dtype() == out.dtype() and x.sizes() == out.sizes())


def _tensor_constant(graph: torch._C.Graph, node: torch._C.Node, number: numbers.Number,
                     dtype: torch.dtype) -> torch._C.Value:
    with graph.insert_point_guard(node):
        return graph.insertConstant(torch.tensor(number, dtype=dtype))


def _representable(number: numbers.Number, dtype: torch.dtype) -> bool:
    """Whether a finite number stays finite in `dtype`. ATen computes a bf16 tensor with a
    number in float32, where float32's lowest (Hugging Face's mask fill) is finite: as a
    bf16 tensor it is -inf, and `0 * it` NaN where eager gives -0.0 (found by the fuzzer)."""
    return not math.isfinite(number) or bool(torch.tensor(number, dtype=dtype).isfinite())




def _cast_operands(graph: torch._C.Graph, node: torch._C.Node, dtype: torch.dtype) -> None:
    for i in (0, 1):
        value = node.inputsAt(i)
        t = value.type()
        if not isinstance(t, torch._C.TensorType) or t.dtype() in (None, dtype):
            continue
        if t.dtype() not in FUSION_DTYPES or t.sizes() is None:
            continue
        node.replaceInput(i, insert_cast(graph, value, dtype, node).output())


def _unobservable(alias_db: torch._C.AliasDb, graph: torch._C.Graph,
                  node: torch._C.Node) -> bool:
    """Whether making the result the input itself changes nothing a caller or
    an in-place op could see."""
    x, out = node.inputsAt(0), node.output()
    return not (alias_db.has_writers(x) or alias_db.has_writers(out)
                or any(alias_db.may_contain_alias(x, v) for v in graph.inputs())
                or any(alias_db.may_contain_alias(out, v) for v in graph.outputs()))


def _prepare(graph: torch._C.Graph, node: torch._C.Node, alias_db: torch._C.AliasDb) -> None:
    if _is_identity(node) and _unobservable(alias_db, graph, node):
        node.output().replaceAllUsesWith(node.inputsAt(0))
        node.destroy()
        return
    dtype = _result_dtype(node)
    if dtype is None or not isinstance(node.inputsAt(0).type(), torch._C.TensorType):
        return
    number = constant_number(node.inputsAt(1))
    operand = node.inputsAt(1).type()
    if number is not None and not (isinstance(operand, torch._C.TensorType)
                                   and operand.dtype() == dtype):
        if not _representable(number, dtype):
            return
        node.replaceInput(1, _tensor_constant(graph, node, number, dtype))
    alpha = _alpha(node)
    if alpha is not None and not _representable(alpha, dtype):
        return
    other = node.inputsAt(1)
    _cast_operands(graph, node, dtype)
    other = node.inputsAt(1)
    if alpha is not None and alpha != 1 and isinstance(other.type(), torch._C.TensorType):
        with graph.insert_point_guard(node):
            factor = graph.insertConstant(torch.tensor(alpha, dtype=dtype))
            scaled = graph.insertNode(graph.create("aten::mul", [other, factor], 1))
        scaled.output().setType(other.type())
        node.replaceInput(1, scaled.output())
        with graph.insert_point_guard(node):
            node.replaceInput(2, graph.insertConstant(1))



def run(graph: torch._C.Graph) -> None:
    # Built once: the pass removes nodes and adds constants, which leaves the
    # answers about the values it asks for unchanged.
    alias_db = graph.alias_db()
    for node in all_nodes(graph.block()):
        if node.kind() in BINARY_ARITHMETIC and node.outputsSize() == 1:
            _prepare(graph, node, alias_db)
