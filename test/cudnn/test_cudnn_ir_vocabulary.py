"""The IR's one vocabulary of modes (ir.POINTWISE, ir.REDUCTION_MODES): the builder
and the interpreter accept the same modes, arities and attributes, and refuse the
same others, so an IR the interpreter checks is one the builder compiles."""

from __future__ import annotations

import pytest
import torch
from frontend_installed import needs_cudnn

from torch_graphfuse.backends.cudnn import builder, interpreter, ir
from torch_graphfuse.backends.cudnn.ir_maker import Maker

DIMS = [2, 3, 4]


def pointwise_graph(mode: str, attrs: dict[str, object]) -> ir.Graph:
    """One pointwise node of `mode`, reading as many tensors as it takes."""
    m = Maker()
    arity = ir.POINTWISE[mode].arity if mode in ir.POINTWISE else 1
    tensors = arity - ("scalar" in attrs)
    inputs = {f"IN_{i}": m.input(DIMS) for i in range(max(tensors, 1))}
    m.result("pointwise", inputs, DIMS, out=True, mode=mode, **attrs)
    return m.graph


def reduction_graph(mode: str) -> ir.Graph:
    m = Maker()
    m.result("reduction", {"X": m.input(DIMS)}, [2, 1, 4], out=True, mode=mode)
    return m.graph


def inputs_of(graph: ir.Graph) -> list[torch.Tensor]:
    return [torch.rand(graph.tensor(tid).dims) + 0.5 for tid in graph.inputs]


# Each mode bare, each with every attribute it takes, and a binary mode's number operand.
ACCEPTED = [(mode, {}) for mode in ir.POINTWISE] + [
    (mode, {name: 0.5}) for mode, spec in ir.POINTWISE.items() for name in spec.attrs] + [
    (mode, {"scalar": 0.5}) for mode, spec in ir.POINTWISE.items() if spec.arity == 2]

# What the frontend cannot express: a mode outside the vocabulary, elu's alpha and
# softplus's beta (the frontend fixes both at 1), another mode's attribute, a
# number operand with no tensor beside it.
REFUSED = [
    ("hardswish_fwd", {}),
    ("elu_fwd", {"elu_alpha": 0.5}),
    ("softplus_fwd", {"softplus_beta": 2.0}),
    ("tanh_fwd", {"swish_beta": 2.0}),
    ("sigmoid_fwd", {"scalar": 2.0}),
]


def test_the_interpreter_gives_every_mode_of_the_vocabulary_its_semantics() -> None:
    assert set(interpreter.SEMANTICS) == set(ir.POINTWISE)
    assert set(interpreter.REDUCTIONS) == set(ir.REDUCTION_MODES)


@needs_cudnn
@pytest.mark.parametrize("mode, attrs", ACCEPTED, ids=str)
def test_builder_and_interpreter_accept_each_pointwise_mode(mode: str,
                                                            attrs: dict[str, object]) -> None:
    graph = pointwise_graph(mode, attrs)
    builder.build(graph)
    (out,) = interpreter.run(graph, inputs_of(graph))
    assert list(out.shape) == DIMS


@needs_cudnn
@pytest.mark.parametrize("mode", ir.REDUCTION_MODES)
def test_builder_and_interpreter_accept_each_reduction_mode(mode: str) -> None:
    graph = reduction_graph(mode)
    builder.build(graph)
    (out,) = interpreter.run(graph, inputs_of(graph))
    assert list(out.shape) == [2, 1, 4]


@needs_cudnn
@pytest.mark.parametrize("mode, attrs", REFUSED, ids=str)
def test_builder_and_interpreter_refuse_what_the_vocabulary_lacks(
        mode: str, attrs: dict[str, object]) -> None:
    graph = pointwise_graph(mode, attrs)
    with pytest.raises(builder.BuildError):
        builder.build(graph)
    with pytest.raises(ValueError):
        interpreter.run(graph, inputs_of(graph))
