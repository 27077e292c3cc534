"""The plan cache (plans/cache.py) over a fake compiler: plans in memory per device,
read back from disk, rebuilt where an entry is not trusted, replaced where a plan
fails to execute, released when no group holds them. cuDNN is never called."""

from __future__ import annotations

import gc
import weakref
from pathlib import Path
from typing import Any

from plan_fakes import FakeCompiler, conv_relu_ir, flip_last_byte, key_of

from torch_graphfuse.backends.cudnn import ir
from torch_graphfuse.backends.cudnn.plans.cache import Compiled, PlanCache
from torch_graphfuse.backends.cudnn.plans.store import PlanStore, decode_entry


def test_second_request_is_a_memory_hit(store: PlanStore) -> None:
    compiler = FakeCompiler()
    cache = PlanCache(compiler, store)
    graph = conv_relu_ir()
    first = cache.get(graph, key_of(graph), 0, None, autotune=False)
    second = cache.get(graph, key_of(graph), 0, None, autotune=False)
    assert second is first
    assert (compiler.builds, cache.stats.plans_built, cache.stats.memory_hits) == (1, 1, 1)


def test_plans_are_per_device_in_memory_but_shared_on_disk(store: PlanStore) -> None:
    compiler = FakeCompiler()
    cache = PlanCache(compiler, store)
    graph = conv_relu_ir()
    on_0 = cache.get(graph, key_of(graph), 0, None, autotune=False)
    on_1 = cache.get(graph, key_of(graph), 1, None, autotune=False)
    assert on_1 is not on_0 and on_1.graph == on_0.graph
    assert (compiler.builds, cache.stats.disk_hits) == (1, 1)


def test_new_process_reads_the_plan_from_disk(store: PlanStore) -> None:
    graph = conv_relu_ir()
    built = PlanCache(FakeCompiler(), store).get(graph, key_of(graph), 0, None, False)
    compiler = FakeCompiler()
    cache = PlanCache(compiler, PlanStore(store.directory))
    loaded = cache.get(graph, key_of(graph), 0, None, autotune=False)
    assert loaded.graph == built.graph and loaded.uids == built.uids
    assert (compiler.builds, compiler.loads, cache.stats.disk_hits) == (0, 1, 1)


def test_corrupt_entry_is_rebuilt_and_overwritten(store: PlanStore) -> None:
    graph = conv_relu_ir()
    key = key_of(graph)
    PlanCache(FakeCompiler(), store).get(graph, key, 0, None, autotune=False)
    store.path(key).write_bytes(flip_last_byte(store.path(key).read_bytes()))
    compiler = FakeCompiler()
    cache = PlanCache(compiler, store)
    rebuilt = cache.get(graph, key, 0, None, autotune=False)
    assert (compiler.builds, compiler.loads) == (1, 0)
    assert (cache.stats.disk_rejected, cache.stats.disk_hits) == (1, 0)
    assert decode_entry(store.path(key).read_bytes(), key).payload == rebuilt.graph


def test_entry_cudnn_cannot_load_is_rebuilt(store: PlanStore) -> None:
    graph = conv_relu_ir()
    key = key_of(graph)
    PlanCache(FakeCompiler(), store).get(graph, key, 0, None, autotune=False)
    compiler = FakeCompiler()
    compiler.fail_loads = True
    cache = PlanCache(compiler, store)
    cache.get(graph, key, 0, None, autotune=False)
    assert (compiler.loads, compiler.builds, cache.stats.disk_rejected) == (1, 1, 1)


def test_autotune_request_replaces_an_untimed_plan(store: PlanStore) -> None:
    graph = conv_relu_ir()
    key = key_of(graph)
    compiler = FakeCompiler()
    cache = PlanCache(compiler, store)
    untimed = cache.get(graph, key, 0, None, autotune=False)
    timed = cache.get(graph, key, 0, None, autotune=True)
    assert not untimed.autotuned and timed.autotuned and compiler.builds == 2
    assert cache.get(graph, key, 0, None, autotune=False) is timed
    fresh = PlanCache(FakeCompiler(), store)
    assert fresh.get(graph, key, 0, None, autotune=True).autotuned
    assert fresh.stats.disk_hits == 1


def test_unserializable_plan_runs_without_a_disk_entry(store: PlanStore) -> None:
    class NoBytes(FakeCompiler):
        def build(self, graph: ir.Graph, handle: Any, autotune: bool, tf32: bool,
                  failed_engines: frozenset[str] = frozenset()
                  ) -> tuple[Compiled, bytes | None]:
            compiled, _ = super().build(graph, handle, autotune, tf32, failed_engines)
            return compiled, None

    graph = conv_relu_ir()
    PlanCache(NoBytes(), store).get(graph, key_of(graph), 0, None, autotune=False)
    assert not store.path(key_of(graph)).exists()


def test_cache_without_store_builds_once(tmp_path: Path) -> None:
    compiler = FakeCompiler()
    cache = PlanCache(compiler, None)
    graph = conv_relu_ir()
    held = [cache.get(graph, key_of(graph), 0, None, autotune=False) for _ in range(3)]
    assert compiler.builds == 1 and cache.stats.memory_hits == 2 and held[0] is held[2]


def test_failed_plan_is_replaced_by_one_of_another_engine_on_disk_too(
        store: PlanStore) -> None:
    compiler = FakeCompiler()
    cache = PlanCache(compiler, store)
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
    fresh = PlanCache(FakeCompiler(), store)
    assert fresh.get(graph, key, 0, None, autotune=False).engine == third.engine


def test_a_plan_replaced_by_another_thread_is_not_replaced_twice(store: PlanStore) -> None:
    cache = PlanCache(FakeCompiler(), store)
    graph = conv_relu_ir()
    key = key_of(graph)
    failed = cache.get(graph, key, 0, None, autotune=False)
    replaced = cache.replace(graph, key, 0, None, failed)
    assert cache.replace(graph, key, 0, None, failed) is replaced
    assert cache.stats.plans_replaced == 1


def test_plan_no_group_holds_is_released_and_read_back_from_disk(store: PlanStore) -> None:
    compiler = FakeCompiler()
    cache = PlanCache(compiler, store)
    graph = conv_relu_ir()
    held = cache.get(graph, key_of(graph), 0, None, autotune=False)
    released = weakref.ref(held)
    del held
    gc.collect()
    assert released() is None
    cache.get(graph, key_of(graph), 0, None, autotune=False)
    assert (compiler.builds, cache.stats.memory_hits, cache.stats.disk_hits) == (1, 0, 1)
