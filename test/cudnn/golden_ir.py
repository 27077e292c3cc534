"""The golden form of a pattern's IR: one JSON object a line, the graph's header,
its tensors, its nodes (a blank line between groups)."""

from __future__ import annotations

import json
from dataclasses import asdict

from lowered_patterns import lowered
from patterns import PATTERNS

from torch_graphfuse.backends.cudnn import ir


def lines(graph_ir: ir.Graph) -> str:
    data = asdict(graph_ir)
    tensors, nodes = data.pop("tensors"), data.pop("nodes")
    return "\n".join(json.dumps(d, sort_keys=True) for d in (data, *tensors, *nodes))


def parsed(text: str) -> ir.Graph:
    """The IR a golden's lines hold (the inverse of `lines`)."""
    header, *rest = (json.loads(line) for line in text.splitlines())
    header["tensors"] = [d for d in rest if "dims" in d]
    header["nodes"] = [d for d in rest if "op" in d]
    return ir.Graph.from_json(json.dumps(header))


def golden(name: str) -> str:
    return "\n\n".join(lines(graph_ir) for graph_ir in lowered(PATTERNS[name]))
