"""torch_graphfuse.config is the one list of settings: the sources read no other
TORCH_GRAPHFUSE_ variable, docs/configuration.md lists the same ones with the same defaults,
and settings() gives what the C++ runtime read."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from torch_graphfuse import config

ROOT = Path(__file__).resolve().parents[2]


def test_the_sources_read_no_setting_the_table_lacks() -> None:
    sources = [*(ROOT / "torch_graphfuse").rglob("*.py"), *(ROOT / "csrc").rglob("*.cpp"),
               *(ROOT / "csrc").rglob("*.h")]
    read = {name for path in sources
            for name in re.findall(r"TORCH_GRAPHFUSE_[A-Z0-9_]+", path.read_text())}
    assert read == {s.env for s in config.SETTINGS}


def test_the_configuration_page_lists_every_setting_with_its_default() -> None:
    page = (ROOT / "docs" / "configuration.md").read_text()
    rows = re.findall(r"^\| `(TORCH_GRAPHFUSE_\w+)` \| (?:`([^`]*)`|unset) \|", page, re.M)
    assert rows == [(s.env, s.default) for s in config.SETTINGS]


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
