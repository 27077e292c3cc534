"""Flush denormals in attention's product with the values.

A softmax row masked with a large negative number (-100 in Swin's shifted windows) holds
probabilities such as exp(-100) = 3.7e-44, below float32's smallest normal (2^-126). x86
cores take a microcode assist for each denormal operand: the [64, 3, 49, 49] x
[64, 3, 49, 32] product of such probabilities with the values took 3.3-4.0 ms in oneDNN
(2.7 ms in ATen's bmm) against 0.03 ms with normal operands, a quarter of timm's Swin-T.

A group is marked `flush_denormals`, and its kernel runs with the cores' flush-to-zero and
denormals-are-zero modes, where:
- a matmul in it multiplies probabilities (a softmax's result, computed in the group or
  read from ATen's softmax) by another tensor, and
- every output of the group is a matmul's result (through views), so no flushed
  probability reaches a reader that could amplify it (a log would give -inf for 0 where
  eager gives -100), and
- every op that computes floats in it is one that cannot amplify a tiny operand: products,
  sums, softmax, division by a number, data movement.

A flushed operand then moves a result by at most about 2^-126 times the other operand's
size per term: below float32's rounding of any result that is itself a normal number.

An ATen softmax whose result only such groups read becomes `graphfuse::softmax_flushed`:
ATen's kernel with the same modes (0.59 against 0.07 ms producing exp(-100) values). Its
readers take a denormal operand as zero anyway, so flushing its results changes nothing.
TORCH_GRAPHFUSE_FLUSH_DENORMALS=0 keeps IEEE gradual underflow everywhere.
"""

from __future__ import annotations

import torch

from ... import config, log
from ...group_schema import ATTR, ONEDNN, SOFTMAX_FLUSHED, backend, is_group, subgraph
from ...passes import shape_arguments

NAME = log.module_name(__file__)
ENV = config.FLUSH_DENORMALS.env

_SOFTMAX = {"aten::softmax", "aten::_softmax"}
_MATMUL = {"aten::matmul", "aten::bmm"}
# Ops whose result holds the same numbers as their first input, rearranged.
_MOVES = {"aten::view", "aten::reshape", "aten::_reshape_alias", "aten::transpose",
          "aten::permute", "aten::contiguous", "aten::unsqueeze", "aten::squeeze",
          "aten::flatten", "aten::unflatten", "aten::expand", "aten::clone", "aten::dropout",
          "aten::select", "aten::slice", "aten::unbind", "aten::chunk", "aten::split",
          "prim::ListUnpack"}
# Float ops whose result moves by at most a bounded multiple of a flushed operand, and
# those that read only a tensor's sizes.
_BOUNDED = _SOFTMAX | _MATMUL | _MOVES | {"aten::add", "aten::sub", "aten::mul",
                                          "aten::masked_fill", "aten::to", "aten::type_as",
                                          "aten::size", "aten::dim", "aten::numel"}


def enabled() -> bool:
    return config.value(config.FLUSH_DENORMALS) != "0"


def _floating(value: torch._C.Value) -> bool:
    """Whether it may hold floats (a tensor of unknown dtype counts)."""
    t = value.type()
    if isinstance(t, torch._C.ListType):
        t = t.getElementType()
    if not isinstance(t, torch._C.TensorType):
        return False
    dtype = t.dtype()
    return dtype is None or dtype.is_floating_point


def _divides_by_a_number(node: torch._C.Node) -> bool:
    divisor = node.inputsAt(1)
    return not isinstance(divisor.type(), torch._C.TensorType) or \
        divisor.node().kind() == "prim::Constant"


def _size_scalar(value: torch._C.Value) -> bool:
    """A 0-dim tensor tracing made of a size (`prim::NumToTensor`) or of a number, or computed
    from such by shape arithmetic (Swin's `h // 7`)."""
    node = value.node()
    if node.kind() == "prim::NumToTensor":
        return True
    if node.kind() == "prim::Constant":
        number = value.toIValue()
        return isinstance(number, (int, float)) or (
            isinstance(number, torch.Tensor) and number.dim() == 0)
    return node.kind() in shape_arguments.ARITHMETIC and all(
        _size_scalar(v) for v in node.inputs() if isinstance(v.type(), torch._C.TensorType))


def _bounded(node: torch._C.Node) -> bool:
    values = list(node.inputs()) + list(node.outputs())
    if not any(_floating(v) and not _size_scalar(v) for v in values):
        return True  # integer shape arithmetic
    kind = node.kind()
    if kind == "aten::div":
        return len(list(node.inputs())) == 2 and _divides_by_a_number(node)
    return kind in _BOUNDED or kind == "prim::Constant"


def _source(value: torch._C.Value) -> torch._C.Value:
    """The value `value` rearranges, through data movement."""
    while value.node().kind() in _MOVES:
        value = value.node().inputsAt(0)
    return value


def flushable(group: torch._C.Node) -> bool:
    sub = subgraph(group)
    # The subgraph's inputs come first among the group's (the rest are finiteness checks).
    outside = {v.unique(): o for v, o in zip(sub.inputs(), group.inputs(), strict=False)}

    def probabilities(value: torch._C.Value) -> bool:
        value = _source(value)
        if value.node().kind() in _SOFTMAX:
            return True
        given = outside.get(value.unique())
        return given is not None and _source(given).node().kind() in _SOFTMAX

    nodes = list(sub.nodes())
    if not all(_bounded(n) for n in nodes):
        return False
    if not any(n.kind() in _MATMUL and any(probabilities(v) for v in n.inputs())
               for n in nodes):
        return False
    return all(_source(v).node().kind() in _MATMUL for v in sub.outputs())


def _read_only_flushed(value: torch._C.Value) -> bool:
    uses = value.uses()
    return bool(uses) and all(is_group(u.user) and u.user.hasAttribute(ATTR.flush_denormals)
                              for u in uses)


def _flush_softmax(graph: torch._C.Graph, node: torch._C.Node) -> None:
    flushed = graph.create(SOFTMAX_FLUSHED, list(node.inputs()), 1)
    flushed.insertBefore(node)
    flushed.output().setType(node.output().type())
    node.output().replaceAllUsesWith(flushed.output())
    node.destroy()


def run(graph: torch._C.Graph, groups: list[torch._C.Node]) -> None:
    if not enabled():
        return
    marked = 0
    for group in groups:
        if backend(group) == ONEDNN and flushable(group):
            group.i_(ATTR.flush_denormals, 1)
            marked += 1
    softmaxes = {v.node() for g in groups if g.hasAttribute(ATTR.flush_denormals)
                 for v in g.inputs() if v.node().kind() == "aten::softmax"
                 and isinstance(v.node().inputsAt(1).type(), torch._C.IntType)}
    flushed = [n for n in softmaxes if _read_only_flushed(n.output())]
    for node in flushed:
        _flush_softmax(graph, node)
    log.update(NAME, f"{marked} attention groups and {len(flushed)} softmaxes they read run "
                     "with denormals flushed to zero")
