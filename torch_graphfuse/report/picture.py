"""A picture of what the last pipeline run fused:

    torch_graphfuse.last_report().picture("fused.svg")

The Graphviz DOT text is always written; the picture is rendered with
Graphviz's `dot` when it is installed, else an indented text listing is
written instead, and the log (name `picture`) says so. snapshot.py holds what
is drawn; layout.py folds its repeated blocks.
"""

from __future__ import annotations

import shutil
import subprocess
import textwrap
from collections.abc import Iterator
from pathlib import Path

from .. import log
from .layout import Element, layout
from .snapshot import Op, Picture

NAME = log.module_name(__file__)
RENDERED = (".svg", ".png", ".pdf")


def _dot_text(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _wrap(text: str) -> str:
    return "\n".join(textwrap.wrap(text, 36))


_BOX_STYLE = {
    "group": 'style="rounded,filled"; fillcolor="#e3f1df"; color="#4d8f3f"',
    "region": 'style="dashed"; color="#c0392b"; fontcolor="#c0392b"',
    "repeat": 'style="bold"; color="#555555"',
}
_OP_STYLE = {  # fused, or left with ATen
    True: 'style="filled", fillcolor="#ffffff"',
    False: 'style="filled", fillcolor="#fbe3e1", color="#c0392b"',
}


def to_dot(picture: Picture) -> str:
    """Graphviz DOT text: one statement a line, clusters for boxes."""
    drawn = layout(picture)
    ids: dict[str, str] = {}

    def node_id(name: str) -> str:
        return ids.setdefault(name, f"n{len(ids)}")

    lines = ["digraph fusion {", f'  label="{_dot_text(picture.title)}"; labelloc=t;',
             "  ranksep=0.2; nodesep=0.2;",
             '  node [shape=box, fontname="Helvetica", fontsize=10, height=0.3, '
             'margin="0.08,0.03"];',
             '  edge [color="#777777"];']
    lines += [f'  {node_id(name)} [label="input {_dot_text(name)}", shape=oval];'
              for name in picture.inputs]

    def emit(elements: list[Element], indent: str) -> None:
        for element in elements:
            if element.op is not None:
                op = element.op
                label = element.label + (f"\n{_wrap(op.why)}" if op.why else "")
                lines.append(f'{indent}{node_id(op.name)} [label="{_dot_text(label)}", '
                             f"{_OP_STYLE[picture.fused(op)]}];")
                continue
            lines.append(f"{indent}subgraph cluster_{len(lines)} {{")
            lines.append(f'{indent}  label="{_dot_text(_wrap(element.label))}"; '
                         f"{_BOX_STYLE[element.style]};")
            emit(element.children, indent + "  ")
            lines.append(f"{indent}}}")

    emit(drawn.elements, "  ")
    lines += [f'  {node_id(f"output {k}")} [label="output {k}", shape=oval];'
              for k in range(len(picture.outputs))]
    lines += [f"  {node_id(a)} -> {node_id(b)};" for a, b in drawn.edges]
    lines += [f'  note{k} [label="{_dot_text(_wrap(note))}", shape=note];'
              for k, note in enumerate(picture.notes)]
    lines.append("}")
    return "\n".join(lines) + "\n"


def _walk(elements: list[Element]) -> Iterator[Element]:
    for element in elements:
        yield element
        yield from _walk(element.children)


def _ops(elements: list[Element]) -> list[Op]:
    return [element.op for element in _walk(elements) if element.op is not None]


def _kinds(elements: list[Element]) -> str:
    """A group's ops in one line, a repeated block of them as "[conv, relu] x3"."""
    return ", ".join(element.label if element.op is not None
                     else f"[{_kinds(element.children)}] {element.label}" for element in elements)


def to_text(picture: Picture) -> str:
    """The same picture as an indented listing: each item, what it reads, and
    for an op left with ATen why."""
    drawn = layout(picture)
    display = {name: f"input {name}" for name in picture.inputs}
    for element in _walk(drawn.elements):
        if element.style == "group":
            display.update((op.name, element.label) for op in _ops(element.children))
        elif element.op is not None:
            display.setdefault(element.op.name, f"{element.label} %{element.op.name}")
    reads: dict[str, list[str]] = {}
    for a, b in drawn.edges:
        reads.setdefault(display.get(b, b), []).append(display[a])
    lines = [picture.title]

    def from_(name: str) -> str:
        sources = [s for s in dict.fromkeys(reads.get(name, ())) if s != name]
        return f"  <- {', '.join(sources)}" if sources else ""

    def emit(elements: list[Element], indent: str) -> None:
        for element in elements:
            if element.op is not None:
                name = display[element.op.name]
                why = f"  [{element.op.why}]" if element.op.why else ""
                lines.append(f"{indent}{name}{from_(name)}{why}")
            elif element.style == "group":
                kinds = _kinds(element.children)
                lines.append(f"{indent}{element.label}: {kinds}{from_(element.label)}")
            else:
                lines.append(f"{indent}{element.label}:")
                emit(element.children, indent + "  ")

    emit(drawn.elements, "  ")
    lines += [f"  output {k}{from_(f'output {k}')}" for k in range(len(picture.outputs))]
    lines += [f"note: {note}" for note in picture.notes]
    return "\n".join(lines) + "\n"


def write(picture: Picture, path: Path) -> Path:
    """Write `path`'s DOT text next to it (.dot) and render `path` with Graphviz's
    `dot`; without `dot`, write the text form (.txt) instead. Returns the picture written."""
    dot_path = path.with_suffix(".dot")
    dot_path.write_text(to_dot(picture))
    if path.suffix == ".dot":
        return dot_path
    dot = shutil.which("dot")
    if path.suffix in RENDERED and dot is not None:
        subprocess.run([dot, f"-T{path.suffix[1:]}", str(dot_path), "-o", str(path)],
                       check=True, capture_output=True)
        return path
    text_path = path.with_suffix(".txt")
    text_path.write_text(to_text(picture))
    if path.suffix != ".txt":
        log.dump(NAME, f"Graphviz's dot is not installed: wrote the picture as text, {text_path}")
    return text_path
