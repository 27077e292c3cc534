"""The set-up scripts: the demo installs only what the CPU path needs, the tests the rest."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"


def _setup_call(script: str) -> list[str]:
    calls = [line.split() for line in (SCRIPTS / script).read_text().splitlines()
             if line.startswith("scripts/setup.sh")]
    assert len(calls) == 1, calls
    return calls[0][1:]


def test_the_demo_installs_no_extra() -> None:
    assert _setup_call("demo.sh") == []


def test_the_tests_install_the_cuda_zoo_and_docs_extras() -> None:
    assert sorted(_setup_call("test.sh")) == ["cuda", "docs", "zoo"]


def test_setup_refuses_an_unknown_extra_before_doing_anything(tmp_path: Path) -> None:
    done = subprocess.run(["bash", str(SCRIPTS / "setup.sh"), "gpu"], capture_output=True,
                          text=True, cwd=tmp_path, timeout=60)
    assert done.returncode == 2
    assert done.stderr.strip() == "usage: scripts/setup.sh [cuda] [zoo] [docs]"


@pytest.mark.parametrize("script", sorted(p.name for p in SCRIPTS.glob("*.sh")))
def test_script_is_valid_bash(script: str) -> None:
    subprocess.run(["bash", "-n", str(SCRIPTS / script)], check=True)
