"""Graph inputs: the random input specs, and the tensors they describe.

`gen_inputs` chooses the shapes (a main input and broadcastable variants, a
second shape), layouts (and a second call's other layout: a group then meets
strides it was not profiled with) and NaN/inf positions; `make_inputs` builds fresh,
identical tensors from a case for each call (each call mutates its own copy).
"""

from __future__ import annotations

import dataclasses
import math

import torch
from torch import Tensor

from torch_graphfuse.testing.fuzz.spec import (
    MAX_INPUT_NUMEL,
    SPECIALS,
    Case,
    Chooser,
    Input,
    chance,
    choice,
    weighted,
)


def _base(shape: tuple[int, ...], layout: str, g: torch.Generator) -> Tensor:
    if layout == "channels_last" and len(shape) == 4:
        return torch.randn(shape, generator=g).contiguous(memory_format=torch.channels_last)
    if layout == "transposed" and len(shape) >= 2:
        swapped = (*shape[:-2], shape[-1], shape[-2])
        return torch.randn(swapped, generator=g).transpose(-1, -2)
    if layout == "offset":
        n = math.prod(shape)
        return torch.randn(n + 3, generator=g)[3:].view(shape)
    if layout == "strided" and len(shape) >= 1:
        return torch.randn((*shape[:-1], 2 * shape[-1]), generator=g)[..., ::2]
    return torch.randn(shape, generator=g)


def make_input(spec: Input, call: int, seed: int, profiling: bool = False) -> Tensor:
    """The input at call `call`'s shape: 0 the profiled, 1 the second, k >= 2 `more[k - 2]`."""
    shape = spec.more[call - 2] if call >= 2 else \
        spec.shape2 if call == 1 and spec.shape2 is not None else spec.shape
    layout = spec.layout2 if call >= 1 and spec.layout2 is not None else spec.layout
    t = _base(tuple(shape), layout, torch.Generator().manual_seed(seed))
    n = t.numel()
    for pos, what in spec.specials:
        if n and not (profiling and spec.late):
            idx = torch.unravel_index(torch.tensor(pos % n), t.shape) if t.dim() else ()
            t[tuple(int(i) for i in idx)] = SPECIALS[what]
    return t


def make_inputs(case: Case, call: int = 0, profiling: bool = False) -> list[Tensor]:
    """Fresh inputs, identical each time (each call mutates its own copy); `call` as in
    make_input (a bool: the second shape or not)."""
    return [make_input(spec, int(call), case.data_seed * 16 + i + 8 * int(call), profiling)
            for i, spec in enumerate(case.inputs)]


def describe_input(spec: Input) -> str:
    text = f"{tuple(spec.shape)} {spec.layout}"
    if spec.specials:
        text += ", " + ", ".join(f"{w} at flat {p}" for p, w in spec.specials)
        if spec.late:
            text += " (after profiling)"
    if spec.shape2 is not None:
        text += f"; new shape {tuple(spec.shape2)}"
    if spec.more:
        text += "; then " + ", ".join(str(tuple(m)) for m in spec.more)
    if spec.layout2 is not None:
        text += f"; then {spec.layout2}"
    return text


FAMILIES = ("image", "seq", "flat", "volume", "vector", "any")


def _main_shape(c: Chooser, family: str | None = None
                ) -> tuple[tuple[int, ...], tuple[int, ...] | None]:
    family = family or weighted(c, [("image", 6), ("seq", 3), ("flat", 2), ("volume", 1),
                                    ("vector", 1), ("any", 2)])
    n = c.integer(1, 3)
    if family == "image":
        shape = (n, choice(c, [3, 1, 2, 4, 6, 8]), c.integer(1, 9), c.integer(1, 9))
    elif family == "seq":
        shape = (n, c.integer(1, 8), choice(c, [4, 1, 3, 5, 8, 16]))
    elif family == "flat":
        shape = (n, choice(c, [8, 1, 3, 5, 16, 32]))
    elif family == "volume":
        shape = (n, c.integer(1, 3), c.integer(1, 4), c.integer(1, 5), c.integer(1, 5))
    elif family == "vector":
        shape = (c.integer(1, 16),)
    else:
        shape = tuple(c.integer(1, 6) for _ in range(c.integer(1, 5)))
    if math.prod(shape) > MAX_INPUT_NUMEL:
        shape = (1, *shape[1:])
    return shape, _second_shape(c, shape, family)


def _second_shape(c: Chooser, shape: tuple[int, ...], family: str) -> tuple[int, ...] | None:
    """Another batch size, or for images another spatial size too, for sequences another
    length (a server's next request)."""
    if len(shape) < 2 or not chance(c, 0.7):
        return None
    new = list(shape)
    new[0] = choice(c, [x for x in (1, 2, 3, 4) if x != shape[0]])
    if family == "image" and chance(c, 0.4):
        new[2], new[3] = c.integer(1, 9), c.integer(1, 9)
    if family == "seq" and chance(c, 0.4):
        new[1] = c.integer(1, 8)
    return tuple(new) if math.prod(new) <= MAX_INPUT_NUMEL else None


def _variant(c: Chooser, shape: tuple[int, ...], shape2: tuple[int, ...] | None
             ) -> tuple[tuple[int, ...], tuple[int, ...] | None]:
    """A shape that broadcasts with the main input's: the same, some dims 1, a suffix."""
    keep = [True] * len(shape)
    if chance(c, 0.6):
        keep = [not chance(c, 0.4) for _ in shape]
    drop = c.integer(0, len(shape) - 1) if chance(c, 0.3) else 0
    a = tuple(s if k else 1 for s, k in zip(shape, keep, strict=True))[drop:]
    b = None if shape2 is None else \
        tuple(s if k else 1 for s, k in zip(shape2, keep, strict=True))[drop:]
    return a, b


def _layout(c: Chooser, rank: int) -> str:
    options = [("contiguous", 5), ("offset", 2), ("strided", 1)]
    if rank >= 2:
        options.append(("transposed", 2))
    if rank == 4:
        options.append(("channels_last", 3))
    return weighted(c, options)


def gen_inputs(c: Chooser, family: str | None = None) -> list[Input]:
    """The inputs: a main one, of `family`'s shapes (FAMILIES) or any, and variants."""
    shape, shape2 = _main_shape(c, family)
    shapes = [(shape, shape2)]
    for _ in range(weighted(c, [(0, 5), (1, 4), (2, 1)])):
        shapes.append(_variant(c, shape, shape2))
    inputs = []
    for s, s2 in shapes:
        specials: tuple[tuple[int, str], ...] = ()
        late = False
        if chance(c, 0.3):
            at = {c.integer(0, math.prod(s) - 1): choice(c, list(SPECIALS))
                  for _ in range(c.integer(1, 3))}
            specials = tuple(sorted(at.items()))
            # Profiled on finite numbers, called with NaN/inf: what a
            # mapping that assumes finite inputs must notice.
            late = chance(c, 0.5)
        layout = _layout(c, len(s))
        layout2 = _layout(c, len(s)) if chance(c, 0.15) else None
        inputs.append(Input(s, s2, layout, specials, late,
                            layout2 if layout2 != layout else None))
    return inputs


def more_sizes(c: Chooser, inputs: list[Input], n: int) -> list[Input]:
    """The inputs with `n` further shapes each, as a serving stream brings them: every dim the
    second shape changed takes new sizes, the same for every input that has that dim (dims
    counted from the last, as they broadcast); an input without a second shape keeps its
    own."""
    changed = {(len(i.shape) - d, i.shape[d], i.shape2[d]) for i in inputs
               if i.shape2 is not None and len(i.shape2) == len(i.shape)
               for d in range(len(i.shape)) if i.shape[d] != i.shape2[d]}
    def at(i: Input, new: dict[tuple[int, int, int], int]) -> tuple[int, ...]:
        if i.shape2 is None or len(i.shape2) != len(i.shape):
            return i.shape
        return tuple(new[(len(i.shape) - d, i.shape[d], i.shape2[d])]
                     if i.shape[d] != i.shape2[d] else i.shape[d] for d in range(len(i.shape)))

    sizes = []
    for _ in range(n):
        new = {key: c.integer(1, max(key[1], key[2]) + 4) for key in sorted(changed)}
        shapes = [at(i, new) for i in inputs]
        if all(math.prod(s) <= MAX_INPUT_NUMEL for s in shapes):
            sizes.append(shapes)
    return [dataclasses.replace(i, more=tuple(s[k] for s in sizes))
            for k, i in enumerate(inputs)]
