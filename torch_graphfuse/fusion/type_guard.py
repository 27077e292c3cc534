"""Type guard: a fusion group runs fused only on inputs of the kind it was built for.

Each group gets the types its non-constant inputs must match:

    graphfuse::FusionGroup[guarded=[0, 3], types=[Float(*, *, *), Float(*, *, *)], ...]

The kernel checks dtype, device and rank (and not requires_grad under grad
mode) before it runs; when they differ it runs the group's subgraph unfused.
The check lives in the kernel rather than in a `prim::If` around it: values
the interpreter hands to a node in the outer block are moved at their last
use, so the kernel sees which inputs nothing else holds and may write its
outputs over (a backend's in-place ports). Sizes and strides are not guarded:
the kernel compiles and caches a partition per concrete input spec, so a new
batch size is a cache miss, not a fallback. A group whose mapping baked in
profiled sizes (a reshape target, a pool kernel; `static_shapes`) also checks
exact sizes; one whose mapping baked in an input's last size (an RMSNorm's gamma;
`last_dims`) checks that size. Frozen weights are constants and need no check.
"""

from __future__ import annotations

import torch

from .. import log
from ..group_schema import ATTR

NAME = log.module_name(__file__)


def _guarded_type(value: torch._C.Value, exact_sizes: bool, last_dim: bool
                  ) -> torch._C.TensorType:
    t = value.type()
    if exact_sizes:
        return t
    sizes: list[int | None] = [None] * t.dim()
    if last_dim and sizes:
        sizes[-1] = t.sizes()[-1]
    return t.with_sizes(sizes)


def guard(group: torch._C.Node) -> None:
    inputs = list(group.inputs())
    guarded = [i for i, v in enumerate(inputs) if v.node().kind() != "prim::Constant"]
    exact = bool(group.i(ATTR.static_shapes))
    last = set(getattr(group, "is")(ATTR.last_dims)) if group.hasAttribute(ATTR.last_dims) \
        else set()
    group.is_(ATTR.guarded, guarded)
    group.tys_(ATTR.types, [_guarded_type(inputs[i], exact, i in last) for i in guarded])


def run(groups: list[torch._C.Node]) -> None:
    for group in groups:
        guard(group)
    log.update(NAME, f"fusion groups guarded: {len(groups)}")
