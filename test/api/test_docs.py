"""The README and docs/: the README starts with the two commands and its examples run, every
page it links exists, every relative link in the docs resolves, and the supported-ops page
lists every op the mapping table takes, and nothing else."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
from fusion_check import assert_matches
from torch import nn

import torch_graphfuse
from torch_graphfuse.backends.onednn.op_table import LOWERINGS

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
PAGES = [README, *sorted(DOCS.glob("*.md"))]


def python_blocks(page: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", page.read_text(), re.S)


def _documented_ops() -> set[str]:
    text = (DOCS / "supported_ops.md").read_text()
    table = text.split("## Supported ops", 1)[1].split("##", 1)[0]
    first_cells = [line.split("|")[1] for line in table.splitlines() if line.startswith("| `")]
    ops = [op for cell in first_cells for op in re.findall(r"`((?:\w+::)?\w+)`", cell)]
    return {op if "::" in op else f"aten::{op}" for op in ops}


def test_supported_ops_page_lists_every_mapped_op() -> None:
    assert _documented_ops() == set(LOWERINGS)


def test_readme_starts_with_the_two_commands() -> None:
    lines = README.read_text().splitlines()
    block = lines[lines.index("```sh") + 1:lines.index("```sh") + 3]
    assert [line.split()[0] for line in block] == ["scripts/demo.sh", "scripts/test.sh"]
    ci = (ROOT / ".ci" / "run").read_text()
    assert "scripts/test.sh" in ci


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_relative_link_resolves(page: Path) -> None:
    for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", page.read_text()):
        if "://" not in target:
            assert (page.parent / target).exists(), f"{page.name} links {target}"


def test_readme_is_a_few_screens() -> None:
    assert len(README.read_text().splitlines()) < 200


def _mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 8), nn.Tanh()).eval()


@pytest.mark.parametrize("index", range(len(python_blocks(README))))
def test_readme_examples_run_fused(index: int, tmp_path: Path,
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # the export example saves a file
    model = _mlp()
    scope = {"model": model, "example": torch.randn(3, 16), "x": torch.randn(5, 16),
             "x1": torch.randn(1, 16), "x8": torch.randn(8, 16)}
    torch_graphfuse.reset_kernel_stats()
    with torch_graphfuse.fuser(torch_graphfuse.is_enabled()):  # restored after the example
        exec(python_blocks(README)[index], scope)
    assert torch_graphfuse.kernel_stats()["fused_runs"] > 0
    if "y" in scope:
        with torch.no_grad():
            assert_matches(scope["y"], model(scope["x"]), "fp32")


def test_bf16_page_example_runs() -> None:
    model = _mlp()
    scope = {"model": model, "example": torch.randn(3, 16), "x": torch.randn(5, 16),
             "torch": torch}
    previous = torch._C._jit_set_autocast_mode(False)  # the example turns it off too
    try:
        with torch_graphfuse.fuser():
            exec(python_blocks(DOCS / "bf16.md")[0], scope)
    finally:
        torch._C._jit_set_autocast_mode(previous)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        assert_matches(scope["y"], model(scope["x"]), "bf16")
