"""The README and docs/: the README starts with the two commands and its examples run, every
page it links exists, every relative link in the docs resolves, and the supported-ops page
lists every op the mapping table takes, and nothing else."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
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


def runnable_blocks(page: Path) -> list[str]:
    """The page's Python blocks but those after `<!-- not run: why -->`."""
    return [block for why, block in re.findall(
        r"(?:<!-- not run: (.+?) -->\n)?```python\n(.*?)```", page.read_text(), re.S)
        if not why]


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


@pytest.mark.skipif(importlib.util.find_spec("mkdocs") is None,
                    reason="mkdocs is not installed (scripts/setup.sh docs installs it)")
def test_the_site_builds_strictly(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir",
                           str(tmp_path / "site")], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]


def test_readme_is_a_few_screens() -> None:
    assert len(README.read_text().splitlines()) < 200


NOT_RUN = re.compile(r"<!-- not run: (.+?) -->\n```python\n")


def _mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 8), nn.Tanh()).eval()


def _convnet() -> nn.Module:
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                         nn.Flatten(), nn.Linear(8, 4)).eval()


def _scope(page: str) -> dict[str, object]:
    """What a page's examples take as given: a model, its example input, a new input `x`."""
    if page == "int8.md":
        return {"torch": torch, "model": _convnet(), "example": torch.randn(2, 3, 12, 12),
                "x": torch.randn(2, 3, 12, 12),
                "calibration": [torch.randn(2, 3, 12, 12) for _ in range(2)]}
    if page == "serving.md":
        return {"model": _convnet()}
    return {"torch": torch, "model": _mlp(), "example": torch.randn(3, 16),
            "x": torch.randn(5, 16), "x1": torch.randn(1, 16), "x8": torch.randn(8, 16)}


EXAMPLES = [(page, i, block) for page in PAGES for i, block in enumerate(runnable_blocks(page))]


def test_every_example_not_run_says_why() -> None:
    for page in PAGES:
        text = page.read_text()
        assert text.count("```python\n") == len(python_blocks(page)), page.name
        for why in NOT_RUN.findall(text):
            assert why.strip(), page.name


@pytest.mark.parametrize(("page", "index", "block"), EXAMPLES,
                         ids=[f"{p.name}-{i}" for p, i, _ in EXAMPLES])
def test_docs_examples_run_fused(page: Path, index: int, block: str, tmp_path: Path,
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # examples that save a file
    scope = _scope(page.name)
    model = scope.get("model")
    torch_graphfuse.reset_kernel_stats()
    previous = torch._C._jit_set_autocast_mode(True)  # bf16's example turns it off
    try:
        with torch_graphfuse.fuser():  # as the user guide turns it on; restored afterwards
            exec(block, scope)
    finally:
        torch._C._jit_set_autocast_mode(previous)
    if page.name != "bf16.md" or torch_graphfuse.onednn_info()["bf16"]:
        # Without bf16 instructions bf16 runs with ATen (docs/bf16.md says so).
        assert torch_graphfuse.kernel_stats()["fused_runs"] > 0
    if "y" in scope and isinstance(model, nn.Module) and page.name != "int8.md":
        bf16 = page.name == "bf16.md"
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            assert_matches(scope["y"], model(scope["x"]), "bf16" if bf16 else "fp32")
