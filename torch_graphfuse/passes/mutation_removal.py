"""Alias and mutation removal: in-place ops become functional where that is safe.

oneDNN Graph ops are pure, so `relu_`, `add_`, ... must become `relu`, `add`
before they can be mapped. torch's RemoveMutation pass rewrites an in-place op
only when alias analysis proves no other alias observes the write, and also
removes list mutation; whatever stays in place is left as a wildcard.
"""

from __future__ import annotations

import torch


def run(graph: torch._C.Graph) -> None:
    torch._C._jit_pass_remove_mutation(graph)
