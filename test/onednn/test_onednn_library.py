"""torch_graphfuse runs torch's own oneDNN (csrc/onednn/api.cpp finds its C API in
libtorch_cpu.so's symbol table), shares it with torch's LLGA fuser, and without it
(a stripped torch) warns once and runs every model unfused."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import torch

import torch_graphfuse
from torch_graphfuse import _C
from torch_graphfuse.testing import runner


def test_the_onednn_is_torchs_own() -> None:
    info = torch_graphfuse.onednn_info()
    assert info["available"], info["problem"]
    # torch names it by its old name: "MKL-DNN v3.12.0 (Git Hash 80afa710...)".
    assert f"v{info['version']} (Git Hash {info['hash']})" in torch.__config__.show()
    torch_lib = Path(torch.__file__).parent / "lib" / "libtorch_cpu.so"
    assert Path(info["library"]).resolve() == torch_lib.resolve()
    assert info["isa"] and re.fullmatch(r"[a-z0-9_]+", info["isa"])


def test_no_other_onednn_or_openmp_is_mapped() -> None:
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU()).eval()
    _, _, graph = runner.fused(model, [torch.randn(1, 3, 16, 16)])
    assert runner.fusion_groups(graph)
    mapped = {line.split()[-1] for line in Path("/proc/self/maps").read_text().splitlines()
              if line.count(" ") >= 5 and "/" in line}
    assert not [p for p in mapped if "dnnl" in Path(p).name], mapped
    assert len([p for p in mapped if Path(p).name.startswith("libgomp")]) <= 1


def test_the_extension_exports_no_onednn_function() -> None:
    # The stubs are hidden: they cannot stand in for another library's oneDNN.
    if shutil.which("nm") is None:
        pytest.skip("nm is not installed")
    out = subprocess.run(["nm", "-D", "--defined-only", _C.__file__], capture_output=True,
                         text=True, check=True).stdout
    assert not [line for line in out.splitlines() if line.split()[-1].startswith("dnnl_")]


STRIPPED_RUN = """
import warnings
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import torch, torch_graphfuse
from torch_graphfuse.testing import runner
model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU()).eval()
x = torch.randn(1, 3, 16, 16)
_, out, graph = runner.fused(model, [x])
with torch.no_grad():
    assert torch.equal(out, model(x))
assert not runner.fusion_groups(graph)
print(torch_graphfuse.onednn_info()["available"])
for w in caught:
    print("WARNING", w.message)
"""


def test_stripped_torch_warns_once_and_runs_unfused(tmp_path: Path) -> None:
    # A torch whose libtorch_cpu.so lost its .symtab (`strip`): a copy of the
    # package made of links, but for that library.
    if shutil.which("strip") is None:
        pytest.skip("strip is not installed")
    torch_dir = Path(torch.__file__).parent
    copy = tmp_path / "torch"
    (copy / "lib").mkdir(parents=True)
    for entry in torch_dir.iterdir():
        if entry.name != "lib":
            (copy / entry.name).symlink_to(entry.resolve())
    for entry in (torch_dir / "lib").iterdir():
        if entry.name != "libtorch_cpu.so":
            (copy / "lib" / entry.name).symlink_to(entry.resolve())
    subprocess.run(["strip", "--strip-all", "-o", str(copy / "lib" / "libtorch_cpu.so"),
                    str(torch_dir / "lib" / "libtorch_cpu.so")], check=True)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(tmp_path), str(Path(torch_graphfuse.__file__).parents[1])]))
    out = subprocess.run([sys.executable, "-c", STRIPPED_RUN], env=env, capture_output=True,
                         text=True, timeout=300, check=True).stdout.splitlines()
    assert out[0] == "False"
    warnings = [line for line in out if line.startswith("WARNING")]
    assert len(warnings) == 1, out
    assert f"torch {torch.__version__}" in warnings[0]
    assert "no ELF symbol table" in warnings[0] and "run unfused" in warnings[0]


SHARED = """
import torch, torch_graphfuse
from torch import nn
torch.manual_seed(0)
def model():
    return nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU(), nn.Flatten(),
                         nn.Linear(8 * 14 * 14, 10)).eval()
x = torch.randn(2, 3, 16, 16)
def profiled(m):
    frozen = torch.jit.freeze(torch.jit.trace(m, x))
    frozen(x); frozen(x)
    return frozen, torch.jit.last_executed_optimized_graph()
def kinds(graph):
    return sorted({n.kind() for n in graph.nodes() if "usion" in n.kind()})
with torch.no_grad():
    a, b, both = model(), model(), model()
    torch.jit.enable_onednn_fusion(True)             # torch's LLGA fuser alone
    fa, ga = profiled(a)
    torch.jit.enable_onednn_fusion(False)
    torch_graphfuse.enable()                          # torch_graphfuse alone
    fb, gb = profiled(b)
    torch.jit.enable_onednn_fusion(True)             # both on: the first pass registered wins
    fboth, gboth = profiled(both)
    for _ in range(3):                                # interleaved, one oneDNN underneath
        for frozen, eager in ((fa, a), (fb, b), (fboth, both)):
            torch.testing.assert_close(frozen(x), eager(x), rtol=1e-4, atol=1e-5)
print(kinds(ga), kinds(gb), kinds(gboth))
"""


def test_llga_and_graphfuse_share_one_process() -> None:
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(SHARED)], capture_output=True,
                         text=True, timeout=300, check=True).stdout
    assert "prim::oneDNNFusionGuard" in out.split("] [")[0]
    assert out.count("graphfuse::FusionGroup") == 2, out


def _gen_api() -> Any:
    spec = importlib.util.spec_from_file_location(
        "gen_api", Path(__file__).resolve().parents[2] / "csrc" / "onednn" / "gen_api.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


TORCH_INCLUDE = Path(torch.__file__).parent / "include"


def test_op_kinds_are_those_torchs_headers_declare() -> None:
    kinds = _gen_api().op_kinds(TORCH_INCLUDE)
    assert {"MatMul", "SoftMax", "LayerNorm", "GroupNorm", "Select"} <= set(kinds)
    assert "LastSymbol" not in kinds and len(kinds) == len(set(kinds))


def test_an_older_onednn_without_a_kind_lists_the_others(tmp_path: Path) -> None:
    # The GPU machines' torch may bring an older oneDNN: the extension must build against
    # its headers, naming only the kinds they have.
    headers = tmp_path / "oneapi" / "dnnl"
    headers.mkdir(parents=True)
    text = (TORCH_INCLUDE / "oneapi" / "dnnl" / "dnnl_graph.hpp").read_text()
    older = "\n".join(line for line in text.splitlines()
                      if "dnnl_graph_op_rms_norm" not in line)
    (headers / "dnnl_graph.hpp").write_text(older)
    kinds = _gen_api().op_kinds(tmp_path)
    assert "RMSNorm" not in kinds and "MatMul" in kinds
