"""The lowering's semantics: every group of every catalog pattern, lowered to IR
and run by the reference interpreter, gives what eager gives for the group's nodes.

Each group is partitioned on the CUDA-typed graph (its IR is what the GPU would
compile) and on the CPU-typed twin (whose nodes torch runs here).
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from lowered_patterns import partitions
from pattern_ir import Pattern, cpu_graph, example_inputs, graph
from patterns import PATTERNS

from torch_graphfuse.backends.cudnn import interpreter, ir
from torch_graphfuse.fusion.partition import Partition

# Relative to the result's largest magnitude: a 16-bit group rounds its
# intermediates where eager rounds each op's result, a few ulps apart.
PATTERN_TOLERANCE = {torch.float32: 2e-6, torch.float16: 4e-3, torch.bfloat16: 3e-2}


def float32_twin(pattern: Pattern) -> Pattern:
    """The pattern with every tensor (number operands too) typed float32."""
    text = pattern.ir.replace("BFloat16(", "Float(").replace("Half(", "Float(")
    return dataclasses.replace(pattern, ir=text, dtype=torch.float32)


def group_function(part: Partition) -> torch._C.ScriptFunction:
    """The group's nodes as a function of its inputs, for torch to run eagerly."""
    sub = torch._C.Graph()
    env: dict[int, torch._C.Value] = {}
    for v in part.inputs:
        env[v.unique()] = sub.addInput()
        env[v.unique()].setType(v.type())
    for node in part.nodes:
        for v in node.inputs():
            if v.unique() not in env:  # a constant argument
                assert v.node().kind() == "prim::Constant", v.node().kind()
                env[v.unique()] = sub.insertNode(sub.createClone(v.node(), None)).output()
        clone = sub.insertNode(sub.createClone(node, lambda v: env[v.unique()]))
        for v, cloned in zip(node.outputs(), clone.outputs(), strict=True):
            env[v.unique()] = cloned
    for v in part.outputs:
        sub.registerOutput(env[v.unique()])
    return torch._C._create_function_from_graph("group", sub)


def lowered_groups(pattern: Pattern) -> list[tuple[ir.Graph, torch._C.ScriptFunction]]:
    """Each group's IR (from the CUDA-typed graph) and its nodes as a function
    (from the CPU-typed twin)."""
    cuda_graph, twin = graph(pattern), cpu_graph(pattern)
    on_cuda, on_cpu = partitions(cuda_graph, "cuda"), partitions(twin, "cpu")
    assert [p.text for p in on_cuda] == [p.text for p in on_cpu]
    return [(ir.Graph.from_json(c.text), group_function(p))
            for c, p in zip(on_cuda, on_cpu, strict=True)]


def run_both(lowered: ir.Graph, run_eager: torch._C.ScriptFunction
             ) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(interpreter's, eager's) result per group output, on the same random inputs."""
    inputs = example_inputs(run_eager.graph)
    eager = run_eager(*inputs)
    eager = list(eager) if isinstance(eager, tuple) else [eager]
    ours = interpreter.run(lowered, inputs)
    assert len(ours) == len(eager)
    return list(zip(ours, eager, strict=True))


def reduction_outputs(graph: ir.Graph) -> set[int]:
    return {tid for node in graph.nodes if node.op == "reduction"
            for tid in node.outputs.values()}


def check_against_eager(pattern: Pattern) -> int:
    """Run every group of the pattern both ways; the number of groups checked."""
    groups = lowered_groups(pattern)
    for lowered, run_eager in groups:
        reduced = reduction_outputs(lowered)
        for tid, (mine, theirs) in zip(lowered.outputs, run_both(lowered, run_eager),
                                       strict=True):
            # A reduction writes float (cuDNN's only choice); the kernel rounds it
            # to the node's dtype once, as here.
            assert mine.dtype == (torch.float32 if tid in reduced else theirs.dtype)
            mine = mine.to(theirs.dtype)
            # The IR keeps dims of 1 the JIT result drops (a reduced dim, the
            # batch of one of a 2-d matmul): the caller views it to the JIT shape.
            assert [d for d in mine.shape if d != 1] == [d for d in theirs.shape if d != 1]
            tol = PATTERN_TOLERANCE[pattern.dtype]
            scale = theirs.float().abs().max().item()
            torch.testing.assert_close(mine.reshape(theirs.shape), theirs,
                                       rtol=tol, atol=tol * max(scale, 1.0))
    return len(groups)


GROUPING = [name for name, p in PATTERNS.items() if p.groups]


@pytest.mark.parametrize("name", GROUPING)
def test_lowered_pattern_runs_like_eager(name):
    assert check_against_eager(PATTERNS[name]) == len(PATTERNS[name].groups)


# A float32 twin loses its prologue (cuDNN runs none with a float intermediate):
# a group that was only prologue and anchor is then no group.
FLOAT32_GROUPING = [name for name in GROUPING
                    if partitions(graph(float32_twin(PATTERNS[name])), "cuda")]


@pytest.mark.parametrize("name", FLOAT32_GROUPING)
def test_lowered_pattern_in_float32_runs_like_eager(name):
    # float32 tolerances catch what a 16-bit type hides (gelu's erf against
    # its tanh approximation differ by 3e-4 at most).
    assert check_against_eager(float32_twin(PATTERNS[name])) > 0


@pytest.mark.parametrize("name", GROUPING)
def test_group_outputs_are_laid_out_as_eager_lays_them_out(name):
    for lowered, run_eager in lowered_groups(PATTERNS[name]):
        for mine, theirs in run_both(lowered, run_eager):
            viewed = mine.view(theirs.shape)
            big = [i for i, d in enumerate(theirs.shape) if d != 1]
            assert [viewed.stride(i) for i in big] == [theirs.stride(i) for i in big]
