"""The graphfuse::FusionGroup node's schema, as `csrc/group_schema.h` lists it.

The header is the one list of the node's attributes; this module reads it from
the extension, so Python passes and C++ kernels cannot spell a name differently.
`ATTR.<field>` is an attribute's name on the node (`group.s_(ATTR.desc, text)`).

Inputs, in order: the backend description's ports; then `shape_inputs` tensors
that only the group's shape arithmetic reads (never seen by the backend; their
sizes are guarded where a mapping baked them in, and part of the kernel's spec
otherwise); then one bool per `finite_inputs` entry, which the `ALL_FINITE` op
computes just before the group (with `finite_by_executor`, the input itself,
which the external backend's executor checks where its plan needs it). Outputs
are new tensors, or with a `tail`, that graph's views of them
(fusion/boundary_views). The `backend` attribute names the kernel: `ONEDNN` for
the built-in oneDNN kernel, `CONSTANT` for the built-in kernel that returns
values computed from the profiled sizes (backends/constant), any other runs
through the executor its backend registered. `SOFTMAX_FLUSHED` is ATen's softmax
run with denormals flushed to zero, for probabilities only flushed groups read.
"""

from __future__ import annotations

from types import SimpleNamespace

import torch

from . import _C

KIND, ALL_FINITE, SOFTMAX_FLUSHED, ONEDNN, CONSTANT, _ATTRIBUTES = _C._group_schema()
# field -> the attribute's name on the node, e.g. ATTR.subgraph == "Subgraph" (the header
# says what each holds).
ATTR = SimpleNamespace(**_ATTRIBUTES)


def is_group(node: torch._C.Node) -> bool:
    return node.kind() == KIND


def subgraph(group: torch._C.Node) -> torch._C.Graph:
    """The group's nodes, as the unfused fallback runs them."""
    return group.g(ATTR.subgraph)


def backend(group: torch._C.Node) -> str:
    return group.s(ATTR.backend)
