"""Prepare partitions: oneDNN partitions all fusion groups of a graph in one call.

Each kernel compiles its partition at its first run, and finding that
partition (oneDNN's get_partitions) costs milliseconds per call, nearly all of
it fixed: one call per group was most of BERT-base's first run. Here the
groups' descriptions go to oneDNN together, and each group whose partition
came back whole gets a `prepared` ticket, which its kernel redeems for the
profiled spec. A group without one finds its partition at its first compile.
"""

from __future__ import annotations

import torch

from ... import _C, log
from ...group_schema import ATTR

NAME = log.module_name(__file__)


def run(groups: list[torch._C.Node]) -> None:
    if not groups:
        return
    tickets = _C._prepare_partitions([group.s(ATTR.desc) for group in groups])
    for group, ticket in zip(groups, tickets, strict=True):
        if ticket >= 0:
            group.i_(ATTR.prepared, ticket)
    prepared = sum(ticket >= 0 for ticket in tickets)
    log.update(NAME, f"{prepared} of {len(groups)} group partitions found in one oneDNN call")
