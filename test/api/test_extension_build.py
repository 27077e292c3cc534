"""The extension as CMakeLists.txt builds it: on the shared libstdc++ torch loaded, linked by
path, so that a toolchain that links libstdc++ statically by default still gives the
extension the process's copy (a second copy's locale facets crash stream formatting)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from torch_graphfuse import _C

FACTS = Path(__file__).resolve().parents[2] / "build" / "cmake" / "torch_facts.cmake"


def test_extension_runs_on_the_shared_libstdcxx_torch_loaded() -> None:
    assert _C._uses_shared_libstdcxx()


def test_build_links_the_libstdcxx_this_process_loaded() -> None:
    if not FACTS.exists():
        pytest.skip("the extension was not built into build/cmake")
    found = re.search(r'set\(TORCH_LIBSTDCXX "([^"]*)"\)', FACTS.read_text())
    assert found is not None and "libstdc++.so" in found.group(1)
    loaded = [line.split()[-1] for line in Path("/proc/self/maps").read_text().splitlines()
              if "/libstdc++.so" in line]
    assert Path(found.group(1)).resolve() in {Path(p).resolve() for p in loaded}
