"""The generator: a random valid case from a chooser.

`generate` draws proposers from weighted tables (an anchor op first, more
often than not) and picks the outputs; `cases` is the same generator as a
hypothesis strategy.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable
from typing import Any

import torch

from torch_graphfuse.testing.fuzz.builder import Gen
from torch_graphfuse.testing.fuzz.inputs import more_sizes
from torch_graphfuse.testing.fuzz.propose_attention import p_attention_block
from torch_graphfuse.testing.fuzz.propose_layers import (
    p_addmm,
    p_attention,
    p_batch_norm,
    p_cat,
    p_conv,
    p_diamond,
    p_group_norm,
    p_layer_norm,
    p_linear,
    p_matmul,
    p_mean,
    p_pool,
    p_resize,
    p_rms_norm,
    p_softmax,
    p_windows,
)
from torch_graphfuse.testing.fuzz.propose_pointwise import (
    p_binary,
    p_cast,
    p_filled_positions,
    p_identity,
    p_inplace,
    p_positions,
    p_shape,
    p_size_scale,
    p_unary,
    p_unsupported,
)
from torch_graphfuse.testing.fuzz.propose_quantized import (
    p_qadd,
    p_qlayer,
    p_qmatmul,
    p_requantize,
    requantize,
)
from torch_graphfuse.testing.fuzz.spec import (
    Case,
    Chooser,
    DrawChooser,
    Op,
    RandomChooser,
    chance,
    choice,
    weighted,
)
from torch_graphfuse.testing.runner import precision

PROPOSERS: list[tuple[Callable[[Gen], int | None], int]] = [
    (p_unary, 16), (p_binary, 14), (p_conv, 9), (p_linear, 5), (p_matmul, 4), (p_addmm, 2),
    (p_attention, 1), (p_attention_block, 2), (p_batch_norm, 3), (p_layer_norm, 3),
    (p_rms_norm, 2), (p_group_norm, 2),
    (p_diamond, 2), (p_pool, 5),
    (p_mean, 3), (p_cat, 3), (p_softmax, 3), (p_shape, 8), (p_identity, 3), (p_cast, 3),
    (p_inplace, 7), (p_unsupported, 4), (p_positions, 3),
    (p_size_scale, 2), (p_filled_positions, 2), (p_windows, 2), (p_resize, 1),
]


def _sinks(g: Gen) -> list[int]:
    used = {a for op in g.ops for a in op.args}
    return [v for v in range(len(g.inputs), g.n) if v not in used and g.meta(v).dep]


def _outputs(g: Gen) -> list[int]:
    """The last value, more sinks, sometimes an intermediate (views and identities too)."""
    cands = [v for v in range(len(g.inputs), g.n) if g.meta(v).dep]
    if not cands:
        return []
    sinks = _sinks(g) or [cands[-1]]
    outs = [sinks[-1]]
    for _ in range(g.c.integer(0, 2)):
        outs.append(choice(g.c, sinks) if chance(g.c, 0.6) else choice(g.c, cands))
    return list(dict.fromkeys(outs))


ANCHORS: list[tuple[Callable[[Gen], int | None], int]] = [
    (p_conv, 5), (p_linear, 3), (p_matmul, 2), (p_addmm, 1), (p_attention, 1),
    (p_attention_block, 2), (p_pool, 2),
    (p_batch_norm, 1), (p_layer_norm, 1), (p_rms_norm, 1), (p_diamond, 2), (p_binary, 3),
]


# Quantized mode: PT2E blocks mostly; float ops between them (those that
# `quantized.propagate` follows are the ones kept on quantized values).
Q_PROPOSERS: list[tuple[Callable[[Gen], int | None], int]] = [
    (p_qlayer, 12), (p_qmatmul, 3), (p_qadd, 3), (p_requantize, 3), (p_unary, 4), (p_binary, 3),
    (p_pool, 3), (p_shape, 3), (p_mean, 1), (p_cat, 1), (p_conv, 2), (p_linear, 1),
    (p_attention_block, 1),
]
Q_ANCHORS: list[tuple[Callable[[Gen], int | None], int]] = [
    (p_qlayer, 6), (p_qmatmul, 1), (p_qadd, 1),
]


# The blocks a run can start every graph with (the CLI's --anchor), and the family of
# input shapes they take (inputs.FAMILIES).
FOCUSED_ANCHORS: dict[str, tuple[Callable[[Gen], int | None], str]] = {
    "attention": (p_attention_block, "seq")}


def generate(c: Chooser, dtype: str = "fp32", max_steps: int = 10,
             quantized: bool = False, anchor: str | None = None, sizes: int = 0) -> Case:
    """A random valid case (a program with at least one op, on input-dependent outputs).
    It starts with an op that fusion groups form around more often than not, or with
    the block `anchor` names (FOCUSED_ANCHORS) where it fits the inputs.
    quantized (fp32 only): in PT2E's form (propose_quantized), ending on a
    quantized grid about half the time. sizes: further sizes each input is called at
    after its second shape (inputs.more_sizes), drawn last: the graph is the one drawn
    without them."""
    if quantized and dtype != "fp32":
        raise ValueError("quantized mode is fp32")
    anchors, proposers = (Q_ANCHORS, Q_PROPOSERS) if quantized else (ANCHORS, PROPOSERS)
    family = None
    if anchor is not None:
        proposer, family = FOCUSED_ANCHORS[anchor]
        anchors = [(proposer, 1)]
    with torch.no_grad(), precision(dtype), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        g = Gen(c, dtype, family)
        for step in range(c.integer(1, max_steps)):
            first = anchor is not None or chance(c, 0.6 if not quantized else 0.8)
            table = anchors if step == 0 and first else proposers
            for _attempt in range(4):
                if weighted(c, table)(g) is not None:
                    break
        if quantized and g.n > len(g.inputs) and chance(c, 0.5):
            requantize(g, g.n - 1)
        outputs = _outputs(g)
        if not outputs:  # nothing input-dependent fitted: a relu always does
            outputs = [g.emit(Op("relu", (0,)))]  # type: ignore[list-item]
        case = g.case(outputs)
    if sizes:
        case = dataclasses.replace(case, inputs=more_sizes(c, case.inputs, sizes))
    return case


def cases(dtype: str, structural: bool = False, max_steps: int = 10,
          quantized: bool = False, anchor: str | None = None, sizes: int = 0) -> Any:
    """A hypothesis strategy over the same generator: by default a drawn seed for
    the CLI's chooser (the CLI's mix of graphs); structural, every choice is
    drawn, so that hypothesis shrinks the program itself (its bias toward small
    draws makes smaller graphs that fuse less often)."""
    from hypothesis import strategies as st

    mode = ("int8" if quantized else dtype) + (f":{anchor}" if anchor else "") + \
        (f":sizes{sizes}" if sizes else "")

    @st.composite  # hypothesis prints what a composite returns: the Case
    def strategy(draw: Callable[[Any], Any]) -> Case:
        c: Chooser = DrawChooser(draw) if structural else \
            RandomChooser(f"hypothesis:{draw(st.integers(0, 2**32 - 1))}:{mode}")
        return generate(c, dtype, max_steps, quantized, anchor, sizes)
    return strategy()
