"""torch_graphfuse.config is the one list of settings: the sources read no other
TORCH_GRAPHFUSE_ variable, docs/configuration.md is the page it makes, settings() gives what
the C++ runtime read, and a value a setting does not take fails the import."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from torch_graphfuse import config

ROOT = Path(__file__).resolve().parents[2]


def test_the_sources_read_no_setting_the_table_lacks() -> None:
    sources = [*(ROOT / "torch_graphfuse").rglob("*.py"), *(ROOT / "csrc").rglob("*.cpp"),
               *(ROOT / "csrc").rglob("*.h")]
    read = {name for path in sources
            for name in re.findall(r"TORCH_GRAPHFUSE_[A-Z0-9_]+", path.read_text())}
    assert read == {s.env for s in config.SETTINGS}


def test_the_configuration_page_is_the_one_the_table_makes() -> None:
    assert (ROOT / "docs" / "configuration.md").read_text() == config.page()


def _settings_in_a_process(**env: str) -> dict[str, str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("TORCH_GRAPHFUSE_")}
    done = subprocess.run(
        [sys.executable, "-c", "import json, torch_graphfuse; "
                               "print(json.dumps(torch_graphfuse.config.settings()))"],
        capture_output=True, text=True, env={**clean, **env}, timeout=120, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_settings_are_the_defaults_the_runtime_uses_where_unset() -> None:
    assert _settings_in_a_process() == {s.env: s.default for s in config.SETTINGS}


def test_settings_give_what_the_environment_set() -> None:
    given = {config.COMPILE_AT.env: "3", config.POOL_MB.env: "64",
             config.SPEED_TRIALS.env: "fuse"}
    found = _settings_in_a_process(**given)
    assert {k: found[k] for k in given} == given


@pytest.mark.parametrize(("setting", "raw", "allowed"), [
    (config.COMPILE_AT, "0", "an integer from 1 on"),
    (config.POOL_MB, "lots", "an integer from 0 on"),
    (config.SPEED_TRIALS, "fast", "one of measure, fuse, aten"),
    (config.FLUSH_DENORMALS, "yes", "one of 0, 1"),
])
def test_a_value_a_setting_does_not_take_fails_the_import_naming_what_it_takes(
        setting: config.Setting, raw: str, allowed: str) -> None:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("TORCH_GRAPHFUSE_")}
    done = subprocess.run([sys.executable, "-c", "import torch_graphfuse"], capture_output=True,
                          text=True, env={**clean, setting.env: raw}, timeout=120)
    assert done.returncode != 0
    assert f"{setting.env}={raw!r}: expected {allowed}" in done.stderr
