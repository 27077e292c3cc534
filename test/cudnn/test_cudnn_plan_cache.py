"""Plan keys, the on-disk plan store, the plan cache and the runtime's input checks,
on CPU: plans are fake bytes from a fake compiler, cuDNN is never called."""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import json
import os
import shutil
import subprocess
import sys
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from torch_graphfuse.backends.cudnn import ir, plans, runtime


def conv_relu_ir(channels: int = 8, dtype: str = "half") -> ir.Graph:
    """conv_fprop (1, channels, 4, 4) * (channels, channels, 3, 3) -> relu, channels_last
    (a layout cuDNN fuses), in `dtype`."""
    c = channels
    x = ir.Tensor(0, [1, c, 4, 4], [16 * c, 1, 4 * c, c], dtype)
    w = ir.Tensor(1, [c, c, 3, 3], [9 * c, 1, 3 * c, c], dtype)
    y = ir.Tensor(2, [1, c, 4, 4], [16 * c, 1, 4 * c, c], dtype, virtual=True)
    z = ir.Tensor(3, [1, c, 4, 4], [16 * c, 1, 4 * c, c], dtype)
    nodes = [ir.Node("conv_fprop", {"X": 0, "W": 1}, {"Y": 2},
                     {"padding": [1, 1], "stride": [1, 1], "dilation": [1, 1]}),
             ir.Node("pointwise", {"IN_0": 2}, {"OUT_0": 3}, {"mode": "relu_fwd"})]
    return ir.Graph(dtype, "float", "float", [x, w, y, z], nodes, [0, 1], [3])


def matmul_ir(dtype: str) -> ir.Graph:
    """matmul (1, 16, 32) @ (1, 32, 8) in `dtype`."""
    a = ir.Tensor(0, [1, 16, 32], [512, 32, 1], dtype)
    b = ir.Tensor(1, [1, 32, 8], [256, 8, 1], dtype)
    c = ir.Tensor(2, [1, 16, 8], [128, 8, 1], dtype)
    return ir.Graph(dtype, "float", "float", [a, b, c],
                    [ir.Node("matmul", {"A": 0, "B": 1}, {"C": 2}, {})], [0, 1], [2])


def key_of(graph: ir.Graph, **changes: Any) -> plans.PlanKey:
    key = plans.PlanKey(graph.fingerprint(), "NVIDIA H100 80GB HBM3", 90, 132, 92800, "1.32.0")
    return dataclasses.replace(key, **changes)


class FakeCompiler:
    """Plans are bytes naming the graph and a build counter; loading checks the bytes."""

    def __init__(self) -> None:
        self.builds = 0
        self.loads = 0
        self.fail_loads = False

    def build(self, graph: ir.Graph, handle: Any, autotune: bool, tf32: bool,
              failed_engines: frozenset[str] = frozenset()
              ) -> tuple[plans.Compiled, bytes | None]:
        self.builds += 1
        self.last_build = (tf32, failed_engines)
        engine = f"eng{len(failed_engines)}"
        payload = f"plan {graph.fingerprint()} #{self.builds} {engine}".encode()
        uids = {tid: 100 + tid for tid in (*graph.inputs, *graph.outputs)}
        return plans.Compiled(payload, uids, 256, autotune, engine, failed_engines), payload

    def load(self, stored: plans.StoredPlan, handle: Any) -> plans.Compiled:
        self.loads += 1
        if self.fail_loads:
            raise RuntimeError("cuDNN refuses the plan")
        uids = {int(tid): int(uid) for tid, uid in stored.meta["uids"]}
        return plans.Compiled(stored.payload, uids, 256, bool(stored.meta["autotuned"]),
                              stored.meta["engine"], frozenset(stored.meta["failed_engines"]))


@pytest.fixture
def store(tmp_path: Path) -> plans.PlanStore:
    return plans.PlanStore(tmp_path / "plans")


# -- keys ---------------------------------------------------------------------------------


def test_same_ir_and_device_give_the_same_key() -> None:
    assert key_of(conv_relu_ir()).digest() == key_of(conv_relu_ir()).digest()


@pytest.mark.parametrize("change", [
    {"device_name": "NVIDIA A100-SXM4-80GB"}, {"sm_version": 80}, {"sm_count": 114},
    {"cudnn_version": 92900}, {"frontend_version": "1.33.0"}, {"tf32": True}])
def test_device_or_library_change_changes_the_key(change: dict[str, Any]) -> None:
    graph = conv_relu_ir()
    assert key_of(graph, **change).digest() != key_of(graph).digest()


def test_ir_change_changes_the_key() -> None:
    other_shape = conv_relu_ir(channels=16)
    other_mode = conv_relu_ir()
    other_mode.nodes[1].attrs["mode"] = "tanh_fwd"
    base = key_of(conv_relu_ir()).digest()
    assert key_of(other_shape).digest() != base
    assert key_of(other_mode).digest() != base


# -- entries on disk ------------------------------------------------------------------------


def test_entry_round_trips_payload_and_meta(store: plans.PlanStore) -> None:
    key = key_of(conv_relu_ir())
    payload = bytes(range(256)) * 3
    assert store.save(key, payload, {"uids": [[0, 7], [3, 9]], "autotuned": True})
    stored = store.load(key)
    assert stored is not None
    assert stored.payload == payload
    assert stored.meta == {"uids": [[0, 7], [3, 9]], "autotuned": True}


def test_missing_entry_loads_as_none(store: plans.PlanStore) -> None:
    assert store.load(key_of(conv_relu_ir())) is None


def _saved(store: plans.PlanStore, key: plans.PlanKey) -> bytes:
    store.save(key, b"cudnn plan bytes" * 10, {"uids": [], "autotuned": False})
    return store.path(key).read_bytes()


def _flip_last_byte(data: bytes) -> bytes:
    return data[:-1] + bytes([data[-1] ^ 0xFF])


def _other_format(data: bytes) -> bytes:
    return data.replace(f'"format": {plans.FORMAT_VERSION}'.encode(), b'"format": 0')


@pytest.mark.parametrize(("damage", "reason"), [
    (_flip_last_byte, "checksum"),
    (lambda data: data[:-5], "bytes, the header says"),
    (lambda data: data[:20], "truncated header"),
    (lambda data: b"", "not a torch_graphfuse plan entry"),
    (lambda data: b"XXXXXXXX" + data[8:], "not a torch_graphfuse plan entry"),
    (_other_format, "entry format 0"),
])
def test_damaged_entry_is_not_trusted(store: plans.PlanStore, damage: Any, reason: str) -> None:
    key = key_of(conv_relu_ir())
    damaged = damage(_saved(store, key))
    with pytest.raises(plans.CorruptEntry, match=reason):
        plans.decode_entry(damaged, key)
    store.path(key).write_bytes(damaged)
    assert store.load(key) is None


def test_entry_of_another_key_is_not_trusted(store: plans.PlanStore) -> None:
    """A file copied or renamed from another key's entry (another GPU, another cuDNN)."""
    graph = conv_relu_ir()
    ours, theirs = key_of(graph), key_of(graph, cudnn_version=91000)
    store.path(ours).parent.mkdir(parents=True)
    store.path(ours).write_bytes(_saved(store, theirs))
    with pytest.raises(plans.CorruptEntry, match="another key"):
        plans.decode_entry(store.path(ours).read_bytes(), ours)
    assert store.load(ours) is None
    assert store.load(theirs) is not None


def test_failed_write_keeps_the_old_entry_and_leaves_no_temporary_file(
        store: plans.PlanStore, monkeypatch: pytest.MonkeyPatch) -> None:
    key = key_of(conv_relu_ir())
    store.save(key, b"old plan", {"uids": [], "autotuned": False})

    def no_rename(src: str, dst: str) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", no_rename)
    assert not store.save(key, b"new plan", {"uids": [], "autotuned": False})
    monkeypatch.undo()
    stored = store.load(key)
    assert stored is not None and stored.payload == b"old plan"
    assert sorted(p.name for p in store.directory.iterdir()) == [store.path(key).name]


def test_unwritable_cache_folder_is_not_an_error(tmp_path: Path) -> None:
    blocker = tmp_path / "a file"
    blocker.write_text("")
    store = plans.PlanStore(blocker / "plans")
    assert not store.save(key_of(conv_relu_ir()), b"plan", {"uids": [], "autotuned": False})
    assert store.load(key_of(conv_relu_ir())) is None


def test_cache_dir_follows_the_environment(monkeypatch: pytest.MonkeyPatch,
                                           tmp_path: Path) -> None:
    monkeypatch.setenv(plans.CACHE_DIR_ENV, str(tmp_path / "mine"))
    assert plans.cache_dir() == tmp_path / "mine"
    monkeypatch.delenv(plans.CACHE_DIR_ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert plans.cache_dir() == tmp_path / "xdg" / "torch_graphfuse" / "cudnn"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert plans.cache_dir() == tmp_path / "home" / ".cache" / "torch_graphfuse" / "cudnn"


@pytest.mark.parametrize(("value", "enabled"), [(None, False), ("0", False), ("", False),
                                                ("1", True)])
def test_autotune_follows_the_environment(monkeypatch: pytest.MonkeyPatch, value: str | None,
                                          enabled: bool) -> None:
    if value is None:
        monkeypatch.delenv(plans.AUTOTUNE_ENV, raising=False)
    else:
        monkeypatch.setenv(plans.AUTOTUNE_ENV, value)
    assert plans.autotune_enabled() is enabled


# -- the plan cache --------------------------------------------------------------------------


def test_second_request_is_a_memory_hit(store: plans.PlanStore) -> None:
    compiler = FakeCompiler()
    cache = plans.PlanCache(compiler, store)
    graph = conv_relu_ir()
    first = cache.get(graph, key_of(graph), 0, None, autotune=False)
    second = cache.get(graph, key_of(graph), 0, None, autotune=False)
    assert second is first
    assert (compiler.builds, cache.stats.plans_built, cache.stats.memory_hits) == (1, 1, 1)


def test_plans_are_per_device_in_memory_but_shared_on_disk(store: plans.PlanStore) -> None:
    compiler = FakeCompiler()
    cache = plans.PlanCache(compiler, store)
    graph = conv_relu_ir()
    on_0 = cache.get(graph, key_of(graph), 0, None, autotune=False)
    on_1 = cache.get(graph, key_of(graph), 1, None, autotune=False)
    assert on_1 is not on_0 and on_1.graph == on_0.graph
    assert (compiler.builds, cache.stats.disk_hits) == (1, 1)


def test_new_process_reads_the_plan_from_disk(store: plans.PlanStore) -> None:
    graph = conv_relu_ir()
    built = plans.PlanCache(FakeCompiler(), store).get(graph, key_of(graph), 0, None, False)
    compiler = FakeCompiler()
    cache = plans.PlanCache(compiler, plans.PlanStore(store.directory))
    loaded = cache.get(graph, key_of(graph), 0, None, autotune=False)
    assert loaded.graph == built.graph and loaded.uids == built.uids
    assert (compiler.builds, compiler.loads, cache.stats.disk_hits) == (0, 1, 1)


def test_corrupt_entry_is_rebuilt_and_overwritten(store: plans.PlanStore) -> None:
    graph = conv_relu_ir()
    key = key_of(graph)
    plans.PlanCache(FakeCompiler(), store).get(graph, key, 0, None, autotune=False)
    store.path(key).write_bytes(_flip_last_byte(store.path(key).read_bytes()))
    compiler = FakeCompiler()
    cache = plans.PlanCache(compiler, store)
    rebuilt = cache.get(graph, key, 0, None, autotune=False)
    assert (compiler.builds, compiler.loads) == (1, 0)
    assert (cache.stats.disk_rejected, cache.stats.disk_hits) == (1, 0)
    assert plans.decode_entry(store.path(key).read_bytes(), key).payload == rebuilt.graph


def test_entry_cudnn_cannot_load_is_rebuilt(store: plans.PlanStore) -> None:
    graph = conv_relu_ir()
    key = key_of(graph)
    plans.PlanCache(FakeCompiler(), store).get(graph, key, 0, None, autotune=False)
    compiler = FakeCompiler()
    compiler.fail_loads = True
    cache = plans.PlanCache(compiler, store)
    cache.get(graph, key, 0, None, autotune=False)
    assert (compiler.loads, compiler.builds, cache.stats.disk_rejected) == (1, 1, 1)


def test_autotune_request_replaces_an_untimed_plan(store: plans.PlanStore) -> None:
    graph = conv_relu_ir()
    key = key_of(graph)
    compiler = FakeCompiler()
    cache = plans.PlanCache(compiler, store)
    untimed = cache.get(graph, key, 0, None, autotune=False)
    timed = cache.get(graph, key, 0, None, autotune=True)
    assert not untimed.autotuned and timed.autotuned and compiler.builds == 2
    assert cache.get(graph, key, 0, None, autotune=False) is timed
    fresh = plans.PlanCache(FakeCompiler(), store)
    assert fresh.get(graph, key, 0, None, autotune=True).autotuned
    assert fresh.stats.disk_hits == 1


def test_unserializable_plan_runs_without_a_disk_entry(store: plans.PlanStore) -> None:
    class NoBytes(FakeCompiler):
        def build(self, graph: ir.Graph, handle: Any, autotune: bool, tf32: bool,
                  failed_engines: frozenset[str] = frozenset()
                  ) -> tuple[plans.Compiled, bytes | None]:
            compiled, _ = super().build(graph, handle, autotune, tf32, failed_engines)
            return compiled, None

    graph = conv_relu_ir()
    plans.PlanCache(NoBytes(), store).get(graph, key_of(graph), 0, None, autotune=False)
    assert not store.path(key_of(graph)).exists()


def test_cache_without_store_builds_once(tmp_path: Path) -> None:
    compiler = FakeCompiler()
    cache = plans.PlanCache(compiler, None)
    graph = conv_relu_ir()
    held = [cache.get(graph, key_of(graph), 0, None, autotune=False) for _ in range(3)]
    assert compiler.builds == 1 and cache.stats.memory_hits == 2 and held[0] is held[2]


# -- the runtime, without CUDA ------------------------------------------------------------------


def specs_of(graph: ir.Graph) -> list[runtime.InputSpec]:
    return [runtime.InputSpec.of(graph.tensor(tid)) for tid in graph.inputs]


def test_inputs_on_the_cpu_are_refused() -> None:
    graph = conv_relu_ir()
    inputs = [torch.zeros(1, 8, 4, 4, dtype=torch.half), torch.zeros(8, 8, 3, 3, dtype=torch.half)]
    with pytest.raises(runtime.InputMismatch, match="cuDNN runs on CUDA"):
        runtime.check_inputs(specs_of(graph), inputs)


def test_wrong_input_count_is_refused() -> None:
    with pytest.raises(runtime.InputMismatch, match="takes 2 inputs, got 1"):
        runtime.check_inputs(specs_of(conv_relu_ir()), [torch.zeros(1, 8, 4, 4)])


def test_wrong_dtype_is_refused() -> None:
    spec = specs_of(conv_relu_ir())[0]
    with pytest.raises(runtime.InputMismatch, match="dtype torch.float32"):
        spec.check(torch.zeros(1, 8, 4, 4), 0)


def test_input_smaller_than_the_ir_reads_is_refused() -> None:
    spec = specs_of(conv_relu_ir())[0]
    with pytest.raises(runtime.InputMismatch, match="reach past"):
        spec.check(torch.zeros(1, 8, 4, 3, dtype=torch.half), 0)
    window = torch.zeros(2, 8, 4, 4, dtype=torch.half)[1:]  # its storage ends where it does
    spec.check(window, 0)
    with pytest.raises(runtime.InputMismatch, match="reach past"):
        spec.check(torch.zeros(128, dtype=torch.half)[8:], 0)  # aligned, 8 elements short


def test_misaligned_input_is_refused() -> None:
    spec = specs_of(conv_relu_ir())[0]
    shifted = torch.zeros(200, dtype=torch.half)[1:129]
    with pytest.raises(runtime.InputMismatch, match="aligned"):
        spec.check(shifted, 0)


def test_input_of_another_shape_with_the_memory_the_ir_reads_passes() -> None:
    """The kernel passes the graph's tensors; the IR may view them differently
    (a linear's (B, S, K) input as a (1, B*S, K) matmul operand)."""
    matmul_a = ir.Tensor(0, [1, 6, 4], [24, 4, 1], "bfloat16")
    runtime.InputSpec.of(matmul_a).check(torch.zeros(2, 3, 4, dtype=torch.bfloat16), 0)


def test_non_tensor_input_is_refused() -> None:
    with pytest.raises(runtime.InputMismatch, match="not a tensor"):
        specs_of(conv_relu_ir())[0].check(3.0, 0)


def test_malformed_description_fails_to_make_an_executor() -> None:
    runtime.reset()
    with pytest.raises(ValueError):
        runtime.group_executor('{"version": 99}')
    assert runtime.stats()["failures"] == 1


def test_swapped_factory_makes_the_executors_and_runs_are_counted() -> None:
    runtime.reset()
    made: list[str] = []

    def doubling(desc: str) -> runtime.Executor:
        made.append(desc)
        return lambda inputs: [inputs[0] * 2]

    def failing(desc: str) -> runtime.Executor:
        def run(inputs: Any) -> list[torch.Tensor]:
            raise RuntimeError("no plan")
        return run

    desc = conv_relu_ir().to_json()
    with runtime.executor_factory(doubling):
        run = runtime.group_executor(desc)
    assert made == [desc]
    assert torch.equal(run([torch.ones(3)])[0], torch.full((3,), 2.0))
    with runtime.executor_factory(failing):
        broken = runtime.group_executor(desc)
    with pytest.raises(RuntimeError, match="no plan"):
        broken([torch.ones(3)])
    stats = runtime.stats()
    assert (stats["executions"], stats["failures"]) == (1, 1)
    assert stats["plans_built"] == 0
    assert runtime.set_executor_factory(None) is runtime.CudnnExecutor


def test_cudnn_executor_refuses_cpu_inputs_before_touching_cudnn() -> None:
    graph = conv_relu_ir()
    run = runtime.CudnnExecutor(graph.to_json())
    with pytest.raises(runtime.InputMismatch, match="CUDA"):
        run([torch.zeros(1, 8, 4, 4, dtype=torch.half), torch.zeros(8, 8, 3, 3, dtype=torch.half)])


# -- real cuDNN plans, deviceless ---------------------------------------------------------------
# cuDNN's deviceless mode builds and (de)serializes plans for a described GPU, but
# its engine libraries load libcuda.so.1: each step runs in a subprocess whose
# library path holds the test-only driver stand-in (fake_libcuda.c), never here.

DEVICELESS_CHILD = """
import dataclasses, json, sys
from pathlib import Path
import cudnn
from torch_graphfuse.backends.cudnn import ir, plans
graph = ir.Graph.from_json(Path(sys.argv[1]).read_text())
key = plans.PlanKey(graph.fingerprint(), "H100 (described)", 90, 132,
                    int(cudnn.backend_version()), cudnn.__version__)
cache = plans.PlanCache(plans.CudnnCompiler(device="H100"), plans.PlanStore(Path(sys.argv[2])))
compiled = cache.get(graph, key, 0, None, autotune=False)
result = {"stats": dataclasses.asdict(cache.stats), "key": key.to_dict(),
          "uids": sorted(compiled.uids.items()), "workspace": compiled.workspace_size}
Path(sys.argv[3]).write_text(json.dumps(result))
"""


@pytest.fixture(scope="module")
def driver_stand_in(tmp_path_factory: pytest.TempPathFactory) -> Path:
    cudnn = pytest.importorskip("cudnn", reason="the cuda extra is not installed")
    if cudnn.backend_version() < 90800:
        pytest.skip("cuDNN's deviceless mode needs cuDNN >= 9.8")
    gcc = shutil.which("gcc")
    if gcc is None:
        pytest.skip("gcc is needed to build the driver stand-in")
    folder = tmp_path_factory.mktemp("fake_driver")
    source = Path(__file__).with_name("fake_libcuda.c")
    subprocess.run([gcc, "-shared", "-fPIC", "-o", str(folder / "libcuda.so.1"), str(source)],
                   check=True)
    return folder


def plan_deviceless(stand_in: Path, graph: ir.Graph, store: plans.PlanStore,
                    tmp_path: Path) -> dict[str, Any]:
    """One process's plan for `graph` through a PlanCache over `store`."""
    graph_file, result = tmp_path / "graph.json", tmp_path / "result.json"
    graph_file.write_text(graph.to_json())
    env = {**os.environ, "LD_LIBRARY_PATH": str(stand_in)}
    done = subprocess.run([sys.executable, "-c", DEVICELESS_CHILD, str(graph_file),
                           str(store.directory), str(result)],
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(result.read_text())


def test_real_plan_is_kept_on_disk_and_read_by_the_next_process(
        driver_stand_in: Path, store: plans.PlanStore, tmp_path: Path) -> None:
    graph = conv_relu_ir()
    first = plan_deviceless(driver_stand_in, graph, store, tmp_path)
    assert (first["stats"]["plans_built"], first["stats"]["disk_hits"]) == (1, 0)
    key = plans.PlanKey(**first["key"])
    entry = plans.decode_entry(store.path(key).read_bytes(), key)
    assert len(entry.payload) > 1000  # a cuDNN plan, not a stub
    second = plan_deviceless(driver_stand_in, graph, store, tmp_path)
    assert (second["stats"]["plans_built"], second["stats"]["disk_hits"]) == (0, 1)
    assert second["uids"] == first["uids"] and second["workspace"] == first["workspace"]


def test_corrupt_real_plan_is_rebuilt_by_the_next_process(
        driver_stand_in: Path, store: plans.PlanStore, tmp_path: Path) -> None:
    graph = conv_relu_ir()
    key = plans.PlanKey(**plan_deviceless(driver_stand_in, graph, store, tmp_path)["key"])
    good = store.path(key).read_bytes()
    middle = len(good) // 2
    store.path(key).write_bytes(good[:middle] + bytes([good[middle] ^ 0x55]) + good[middle + 1:])
    again = plan_deviceless(driver_stand_in, graph, store, tmp_path)
    assert again["stats"]["disk_rejected"] == 1 and again["stats"]["plans_built"] == 1
    plans.decode_entry(store.path(key).read_bytes(), key)  # whole again


def test_group_cudnn_refuses_is_not_planned_again_on_every_run(
        store: plans.PlanStore, monkeypatch: pytest.MonkeyPatch) -> None:
    class Refusing(FakeCompiler):
        def build(self, graph: ir.Graph, handle: Any, autotune: bool, tf32: bool,
                  failed_engines: frozenset[str] = frozenset()
                  ) -> tuple[plans.Compiled, bytes | None]:
            self.builds += 1
            raise RuntimeError("no engine supports this graph")

    compiler = Refusing()
    monkeypatch.setattr(runtime, "plan_cache", lambda: plans.PlanCache(compiler, store))
    monkeypatch.setattr(plans, "device_key", lambda graph, index: key_of(graph))
    executor = runtime.CudnnExecutor(conv_relu_ir().to_json())
    with pytest.raises(RuntimeError, match="no engine supports this graph"):
        executor.plan_for(0, None)
    with pytest.raises(RuntimeError, match="cuDNN has no plan for this group: .*no engine"):
        executor.plan_for(0, None)
    assert compiler.builds == 1


def test_executor_keeps_its_plan_per_device(store: plans.PlanStore,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    cache = plans.PlanCache(FakeCompiler(), store)
    monkeypatch.setattr(runtime, "plan_cache", lambda: cache)
    monkeypatch.setattr(plans, "device_key", lambda graph, index: key_of(graph))
    executor = runtime.CudnnExecutor(conv_relu_ir().to_json())
    _, first = executor.plan_for(0, None)
    assert executor.plan_for(0, None)[1] is first and cache.stats.memory_hits == 0
    assert executor.plan_for(1, None)[1] is not first
    assert first.uids == {0: 100, 1: 101, 3: 103}


def test_executor_plans_again_when_torch_tf32_flag_changes(
        store: plans.PlanStore, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = plans.PlanCache(FakeCompiler(), store)
    monkeypatch.setattr(runtime, "plan_cache", lambda: cache)
    monkeypatch.setattr(plans, "device_key",
                        lambda graph, index: key_of(graph, tf32=plans.tf32_allowed(graph)))
    executor = runtime.CudnnExecutor(conv_relu_ir(dtype="float").to_json())
    with tf32_flags(conv=False, matmul=False):
        key_ieee, ieee = executor.plan_for(0, None)
    with tf32_flags(conv=True, matmul=False):
        key_tf32, tf32 = executor.plan_for(0, None)
    assert (key_ieee.tf32, key_tf32.tf32) == (False, True) and tf32 is not ieee
    assert cache.compiler.last_build[0] is True  # type: ignore[attr-defined]


def _executor_over(cache: plans.PlanCache, monkeypatch: pytest.MonkeyPatch
                   ) -> runtime.CudnnExecutor:
    monkeypatch.setattr(runtime, "plan_cache", lambda: cache)
    monkeypatch.setattr(plans, "device_key", lambda graph, index: key_of(graph))
    return runtime.CudnnExecutor(conv_relu_ir().to_json())


def test_a_plan_that_fails_to_execute_is_replaced_for_this_run_and_the_next(
        store: plans.PlanStore, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = plans.PlanCache(FakeCompiler(), store)
    executor = _executor_over(cache, monkeypatch)
    key, first = executor.plan_for(0, None)

    def run(plan: plans.Compiled) -> list[torch.Tensor]:
        if plan.engine == "eng0":
            raise RuntimeError("CUDNN_STATUS_EXECUTION_FAILED")
        return [torch.zeros(1)]

    assert executor.run_replacing(0, key, first, None, run) == [torch.zeros(1)]
    assert executor.plan_for(0, None)[1].engine == "eng1"
    assert cache.stats.plans_replaced == 1


def test_a_group_no_plan_runs_is_refused_instead_of_replanned_on_every_call(
        store: plans.PlanStore, monkeypatch: pytest.MonkeyPatch) -> None:
    compiler = FakeCompiler()
    executor = _executor_over(plans.PlanCache(compiler, store), monkeypatch)
    key, first = executor.plan_for(0, None)

    def run(plan: plans.Compiled) -> list[torch.Tensor]:
        raise RuntimeError(f"{plan.engine} fails")

    with pytest.raises(RuntimeError, match="eng3 fails"):
        executor.run_replacing(0, key, first, None, run)
    assert compiler.builds == 1 + runtime.CudnnExecutor.MAX_REPLACEMENTS
    with pytest.raises(RuntimeError, match="cuDNN has no plan for this group: .*eng3 fails"):
        executor.plan_for(0, None)
    assert compiler.builds == 1 + runtime.CudnnExecutor.MAX_REPLACEMENTS


# -- precision ---------------------------------------------------------------------------------


@contextlib.contextmanager
def tf32_flags(conv: bool, matmul: bool) -> Iterator[None]:
    """torch's two TF32 flags set, then put back (the cuBLAS one is not an attribute
    monkeypatch can restore)."""
    saved = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = conv, matmul
    try:
        yield
    finally:
        torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = saved


def test_tf32_follows_eager_flags_per_anchor() -> None:
    conv, matmul = conv_relu_ir(dtype="float"), matmul_ir("float")
    with tf32_flags(conv=True, matmul=False):
        assert (plans.tf32_allowed(conv), plans.tf32_allowed(matmul)) == (True, False)
        assert not plans.tf32_allowed(conv_relu_ir(dtype="half"))
    with tf32_flags(conv=False, matmul=True):
        assert (plans.tf32_allowed(conv), plans.tf32_allowed(matmul)) == (False, True)
        assert not plans.tf32_allowed(matmul_ir("bfloat16"))


def test_engines_that_down_convert_are_never_chosen_and_tensor_cores_only_with_tf32() -> None:
    assert plans.deselected_notes(conv_relu_ir(dtype="half"), tf32=False) == ["DOWN_CONVERT_INPUTS"]
    assert plans.deselected_notes(conv_relu_ir(dtype="float"), tf32=True) == ["DOWN_CONVERT_INPUTS"]
    assert plans.deselected_notes(conv_relu_ir(dtype="float"), tf32=False) == [
        "DOWN_CONVERT_INPUTS", "TENSOR_CORE"]


# -- a plan that fails to execute, and plans no group uses --------------------------------------


def test_failed_plan_is_replaced_by_one_of_another_engine_on_disk_too(
        store: plans.PlanStore) -> None:
    compiler = FakeCompiler()
    cache = plans.PlanCache(compiler, store)
    graph = conv_relu_ir()
    key = key_of(graph)
    failed = cache.get(graph, key, 0, None, autotune=False)
    second = cache.replace(graph, key, 0, None, failed)
    assert (failed.engine, second.engine, second.failed_engines) == ("eng0", "eng1",
                                                                     frozenset({"eng0"}))
    third = cache.replace(graph, key, 0, None, second)
    assert third.failed_engines == {"eng0", "eng1"}
    assert cache.get(graph, key, 0, None, autotune=False) is third
    assert cache.stats.plans_replaced == 2
    fresh = plans.PlanCache(FakeCompiler(), store)
    assert fresh.get(graph, key, 0, None, autotune=False).engine == third.engine


def test_a_plan_replaced_by_another_thread_is_not_replaced_twice(store: plans.PlanStore) -> None:
    cache = plans.PlanCache(FakeCompiler(), store)
    graph = conv_relu_ir()
    key = key_of(graph)
    failed = cache.get(graph, key, 0, None, autotune=False)
    replaced = cache.replace(graph, key, 0, None, failed)
    assert cache.replace(graph, key, 0, None, failed) is replaced
    assert cache.stats.plans_replaced == 1


def test_plan_no_group_holds_is_released_and_read_back_from_disk(store: plans.PlanStore) -> None:
    compiler = FakeCompiler()
    cache = plans.PlanCache(compiler, store)
    graph = conv_relu_ir()
    held = cache.get(graph, key_of(graph), 0, None, autotune=False)
    released = weakref.ref(held)
    del held
    gc.collect()
    assert released() is None
    cache.get(graph, key_of(graph), 0, None, autotune=False)
    assert (compiler.builds, cache.stats.memory_hits, cache.stats.disk_hits) == (1, 0, 1)


ENGINES_CHILD = """
import json, sys
from pathlib import Path
from torch_graphfuse.backends.cudnn import ir, plans
compiler = plans.CudnnCompiler(device="H100")
graph = ir.Graph.from_json(Path(sys.argv[1]).read_text())
result = {}
for tf32 in (False, True):
    try:
        first, payload = compiler.build(graph, None, False, tf32)
    except RuntimeError as error:
        result[str(tf32)] = {"error": str(error)}
        continue
    entry = {"engine": first.engine, "config": first.engine_config,
             "loaded": compiler.load(plans.StoredPlan(payload, first.meta()), None).engine}
    try:
        entry["next"] = compiler.build(graph, None, False, tf32,
                                       frozenset({first.engine}))[0].engine
    except RuntimeError:
        entry["next"] = None
    result[str(tf32)] = entry
Path(sys.argv[2]).write_text(json.dumps(result))
"""


def engines_deviceless(stand_in: Path, graph: ir.Graph, tmp_path: Path) -> dict[str, Any]:
    """cuDNN's first plan for `graph` on a described H100 with TF32 off and on, the
    plan after it when its engine fails, and the engine its serialized form loads as."""
    graph_file, result = tmp_path / "graph.json", tmp_path / "engines.json"
    graph_file.write_text(graph.to_json())
    env = {**os.environ, "LD_LIBRARY_PATH": str(stand_in)}
    done = subprocess.run([sys.executable, "-c", ENGINES_CHILD, str(graph_file), str(result)],
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(result.read_text())


def test_real_failed_engine_is_replaced_by_another_and_plans_keep_their_engine(
        driver_stand_in: Path, tmp_path: Path) -> None:
    found = engines_deviceless(driver_stand_in, conv_relu_ir(dtype="half"), tmp_path)["False"]
    assert found["next"] not in (None, found["engine"])
    assert found["loaded"] == found["engine"]
    assert found["config"] is not None and isinstance(found["config"][0], int)


def test_real_fp32_matmul_without_tf32_has_no_plan_and_says_why(
        driver_stand_in: Path, tmp_path: Path) -> None:
    # On sm_90, every engine cuDNN offers for an fp32 matmul runs on tensor cores: with
    # TF32 off, as eager's matmuls are by default, the group stays with ATen.
    found = engines_deviceless(driver_stand_in, matmul_ir("float"), tmp_path)
    assert "without TF32, and TF32 is off" in found["False"]["error"]
    assert found["True"]["engine"]
