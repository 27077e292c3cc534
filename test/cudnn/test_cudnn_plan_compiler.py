"""Plans made by cuDNN (plans/compiler.py): autotuning follows the environment, and,
deviceless for a described H100, real plans are kept on disk and read by the next
process, a corrupt one is rebuilt, a failed engine is replaced by another, and an
fp32 matmul with TF32 off has no plan and says why. Each cuDNN step runs in a
subprocess with the driver stand-in (conftest.py's deviceless_env), never here."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from plan_fakes import conv_relu_ir, matmul_ir

from torch_graphfuse.backends.cudnn import ir
from torch_graphfuse.backends.cudnn.plans.compiler import AUTOTUNE_ENV, autotune_enabled
from torch_graphfuse.backends.cudnn.plans.key import PlanKey
from torch_graphfuse.backends.cudnn.plans.store import PlanStore, decode_entry


@pytest.mark.parametrize(("value", "enabled"), [(None, False), ("0", False), ("", False),
                                                ("1", True)])
def test_autotune_follows_the_environment(monkeypatch: pytest.MonkeyPatch, value: str | None,
                                          enabled: bool) -> None:
    if value is None:
        monkeypatch.delenv(AUTOTUNE_ENV, raising=False)
    else:
        monkeypatch.setenv(AUTOTUNE_ENV, value)
    assert autotune_enabled() is enabled


# -- real cuDNN plans, deviceless ---------------------------------------------------------------

# One process's plan for the graph (argv[1]) through a PlanCache over a store (argv[3]).
CACHE_CHILD = """
import dataclasses, json, sys
from pathlib import Path
import cudnn
from torch_graphfuse.backends.cudnn import ir
from torch_graphfuse.backends.cudnn.plans.cache import PlanCache
from torch_graphfuse.backends.cudnn.plans.compiler import CudnnCompiler
from torch_graphfuse.backends.cudnn.plans.key import PlanKey
from torch_graphfuse.backends.cudnn.plans.store import PlanStore
graph = ir.Graph.from_json(Path(sys.argv[1]).read_text())
key = PlanKey(graph.fingerprint(), "H100 (described)", 90, 132,
              int(cudnn.backend_version()), cudnn.__version__)
cache = PlanCache(CudnnCompiler(device="H100"), PlanStore(Path(sys.argv[3])))
compiled = cache.get(graph, key, 0, None, autotune=False)
result = {"stats": dataclasses.asdict(cache.stats), "key": key.to_dict(),
          "uids": sorted(compiled.uids.items()), "workspace": compiled.workspace_size}
Path(sys.argv[2]).write_text(json.dumps(result))
"""

# cuDNN's first plan for the graph (argv[1]) on a described H100 with TF32 off and on,
# the plan after it when its engine fails, and the engine its serialized form loads as.
ENGINES_CHILD = """
import json, sys
from pathlib import Path
from torch_graphfuse.backends.cudnn import ir
from torch_graphfuse.backends.cudnn.plans.compiler import CudnnCompiler
from torch_graphfuse.backends.cudnn.plans.store import StoredPlan
compiler = CudnnCompiler(device="H100")
graph = ir.Graph.from_json(Path(sys.argv[1]).read_text())
result = {}
for tf32 in (False, True):
    try:
        first, payload = compiler.build(graph, None, False, tf32)
    except RuntimeError as error:
        result[str(tf32)] = {"error": str(error)}
        continue
    entry = {"engine": first.engine, "config": first.engine_config,
             "loaded": compiler.load(StoredPlan(payload, first.meta()), None).engine}
    try:
        entry["next"] = compiler.build(graph, None, False, tf32,
                                       frozenset({first.engine}))[0].engine
    except RuntimeError:
        entry["next"] = None
    result[str(tf32)] = entry
Path(sys.argv[2]).write_text(json.dumps(result))
"""


def in_child(code: str, graph: ir.Graph, env: dict[str, str], tmp_path: Path,
             *args: str) -> dict[str, Any]:
    """What `code` writes for `graph` (argv[1]) to its result file (argv[2]), run in a
    subprocess with `env`, `args` after them."""
    graph_file, result = tmp_path / "graph.json", tmp_path / "result.json"
    graph_file.write_text(graph.to_json())
    done = subprocess.run([sys.executable, "-c", code, str(graph_file), str(result), *args],
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(result.read_text())


def plan_deviceless(env: dict[str, str], graph: ir.Graph, store: PlanStore,
                    tmp_path: Path) -> dict[str, Any]:
    return in_child(CACHE_CHILD, graph, env, tmp_path, str(store.directory))


def test_real_plan_is_kept_on_disk_and_read_by_the_next_process(
        deviceless_env: dict[str, str], store: PlanStore, tmp_path: Path) -> None:
    graph = conv_relu_ir()
    first = plan_deviceless(deviceless_env, graph, store, tmp_path)
    assert (first["stats"]["plans_built"], first["stats"]["disk_hits"]) == (1, 0)
    key = PlanKey(**first["key"])
    entry = decode_entry(store.path(key).read_bytes(), key)
    assert len(entry.payload) > 1000  # a cuDNN plan, not a stub
    second = plan_deviceless(deviceless_env, graph, store, tmp_path)
    assert (second["stats"]["plans_built"], second["stats"]["disk_hits"]) == (0, 1)
    assert second["uids"] == first["uids"] and second["workspace"] == first["workspace"]


def test_corrupt_real_plan_is_rebuilt_by_the_next_process(
        deviceless_env: dict[str, str], store: PlanStore, tmp_path: Path) -> None:
    graph = conv_relu_ir()
    key = PlanKey(**plan_deviceless(deviceless_env, graph, store, tmp_path)["key"])
    good = store.path(key).read_bytes()
    middle = len(good) // 2
    store.path(key).write_bytes(good[:middle] + bytes([good[middle] ^ 0x55]) + good[middle + 1:])
    again = plan_deviceless(deviceless_env, graph, store, tmp_path)
    assert again["stats"]["disk_rejected"] == 1 and again["stats"]["plans_built"] == 1
    decode_entry(store.path(key).read_bytes(), key)  # whole again


def test_real_failed_engine_is_replaced_by_another_and_plans_keep_their_engine(
        deviceless_env: dict[str, str], tmp_path: Path) -> None:
    found = in_child(ENGINES_CHILD, conv_relu_ir(dtype="half"), deviceless_env,
                     tmp_path)["False"]
    assert found["next"] not in (None, found["engine"])
    assert found["loaded"] == found["engine"]
    assert found["config"] is not None and isinstance(found["config"][0], int)


def test_real_fp32_matmul_without_tf32_has_no_plan_and_says_why(
        deviceless_env: dict[str, str], tmp_path: Path) -> None:
    # On sm_90, every engine cuDNN offers for an fp32 matmul runs on tensor cores: with
    # TF32 off, as eager's matmuls are by default, the group stays with ATen.
    found = in_child(ENGINES_CHILD, matmul_ir("float"), deviceless_env, tmp_path)
    assert "without TF32, and TF32 is off" in found["False"]["error"]
    assert found["True"]["engine"]
