"""Layout propagation: a tensor passed between fusion groups keeps oneDNN's layout.

A group output that only other fusion groups read is marked `any_layout`: the
kernel compiles it with oneDNN's `any` layout, so oneDNN writes it in the
layout its kernels prefer and the next group reads it as it is, with no
reorder at the boundary. oneDNN 3.12 answers with strided layouts (NHWC for
activations), which cross the boundary as ordinary torch tensors with those
strides; were it to answer with a blocked layout, the kernel compiles that
group again with strided outputs. Outputs that the caller or an unfused op
reads keep the strides eager gave them.
"""

from __future__ import annotations

import torch

from ... import log
from ...group_schema import ATTR, ONEDNN, backend, is_group

NAME = log.module_name(__file__)


def _read_only_by_groups(value: torch._C.Value) -> bool:
    """Whether only oneDNN groups read it as it is (a group's head takes torch views of
    its inputs, which need torch's strides)."""
    uses = value.uses()
    return bool(uses) and all(is_group(use.user) and backend(use.user) == ONEDNN
                              and not use.user.hasAttribute(ATTR.head) for use in uses)


def run(groups: list[torch._C.Node]) -> None:
    marked: set[int] = set()
    for group in groups:
        if group.hasAttribute(ATTR.tail):  # its outputs are torch views the kernel takes
            continue
        indices = [i for i, v in enumerate(group.outputs()) if _read_only_by_groups(v)]
        if indices:
            group.is_(ATTR.any_layout, indices)
            marked |= {group.outputsAt(i).unique() for i in indices}
    # Their readers take them in whatever layout oneDNN chose (the kernel
    # checks the other inputs' layouts against the profiling runs).
    for group in groups:
        shape_inputs = group.i(ATTR.shape_inputs) if group.hasAttribute(ATTR.shape_inputs) else 0
        ports = group.inputsSize() - shape_inputs
        free = [i for i, v in enumerate(list(group.inputs())[:ports]) if v.unique() in marked]
        if free:
            group.is_(ATTR.free_layout, free)
    log.update(NAME, f"{len(marked)} group outputs passed to other groups in oneDNN's layout")
