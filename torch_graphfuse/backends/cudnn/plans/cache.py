"""Plans in memory, per device, for the life of the process, backed by the store.

A plan is kept as cuDNN serialized it, with its engine id and knobs beside it,
never as an index into the heuristics' list (that list drifts between cuDNN
versions). The memory cache holds a plan only while a group uses it: when the
last group that runs it dies, cuDNN's plan is released.

A plan that fails to execute is replaced by the next one cuDNN offers for the
graph, the failed engines deselected (runtime.py retries), as torch's own cuDNN
convolutions do.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from .... import log
from .. import ir
from .key import PlanKey
from .store import NAME, PlanStore, StoredPlan


@dataclass(eq=False)
class Compiled:
    """A plan ready to execute on one device."""

    graph: Any  # the built or deserialized cudnn.pygraph
    uids: dict[int, int]  # IR tensor id -> the frontend's uid, for the group's ports
    workspace_size: int
    autotuned: bool
    # The plan's engine name, and the engines that failed to execute before it: the
    # next plan is chosen with all of them deselected.
    engine: str = ""
    failed_engines: frozenset[str] = frozenset()
    # (engine id, knobs) as cuDNN reports them, kept with the serialized plan.
    engine_config: list[Any] | None = None
    # Whether the plan gives NaN and infinities where eager does (probed once by the
    # runtime, for groups whose mapping assumes finite inputs; None: not yet asked).
    keeps_special_values: bool | None = None
    # The plan read back by the C++ executor (runtime.native_plan): None until asked,
    # False where it cannot be.
    native: Any = None
    # A pygraph keeps per-call state: one execute at a time per plan.
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def meta(self) -> dict[str, Any]:
        return {"uids": sorted(self.uids.items()), "autotuned": self.autotuned,
                "engine": self.engine, "failed_engines": sorted(self.failed_engines),
                "engine_config": self.engine_config}


class Compiler(Protocol):
    """Builds plans and reads serialized ones (CudnnCompiler; fakes in tests)."""

    def build(self, graph: ir.Graph, handle: Any, autotune: bool, tf32: bool,
              failed_engines: frozenset[str] = frozenset()
              ) -> tuple[Compiled, bytes | None]: ...

    def load(self, stored: StoredPlan, handle: Any) -> Compiled: ...


@dataclass
class CacheStats:
    plans_built: int = 0
    memory_hits: int = 0
    disk_hits: int = 0
    disk_rejected: int = 0  # entries found on disk but not trusted or not loadable
    plans_replaced: int = 0  # plans that failed to execute, replaced by the next one
    build_ms: float = 0.0


class PlanCache:
    """Plans in memory by (key, device), backed by a PlanStore (or none)."""

    def __init__(self, compiler: Compiler, store: PlanStore | None) -> None:
        self.compiler = compiler
        self.store = store
        self.stats = CacheStats()
        # Held weakly: the executors of live groups hold their plans.
        self._memory: weakref.WeakValueDictionary[tuple[PlanKey, int], Compiled] = (
            weakref.WeakValueDictionary())
        # Held while choosing a plan: two threads never build the same one twice.
        self._lock = threading.Lock()

    def get(self, graph: ir.Graph, key: PlanKey, device_index: int, handle: Any,
            autotune: bool) -> Compiled:
        """The plan of `graph` for `key` on `device_index`. An untimed plan does not
        satisfy a request to autotune: it is rebuilt (and its entry overwritten)."""
        def good_enough(autotuned: bool) -> bool:
            return autotuned or not autotune

        with self._lock:
            compiled = self._memory.get((key, device_index))
            if compiled is not None and good_enough(compiled.autotuned):
                self.stats.memory_hits += 1
                return compiled
            compiled = self._from_disk(key, handle, good_enough)
            if compiled is None:
                compiled = self._build(graph, key, handle, autotune)
            self._memory[(key, device_index)] = compiled
            return compiled

    def _from_disk(self, key: PlanKey, handle: Any,
                   good_enough: Callable[[bool], bool]) -> Compiled | None:
        if self.store is None:
            return None
        path = self.store.path(key)
        stored = self.store.load(key)
        if stored is None:
            if path.exists():
                self.stats.disk_rejected += 1
            return None
        if not good_enough(bool(stored.meta.get("autotuned"))):
            return None
        try:
            compiled = self.compiler.load(stored, handle)
        except Exception as error:  # cuDNN refusing a blob it wrote: a newer driver, say
            log.debug(NAME, f"cannot load {path}, rebuilding: {error}")
            self.stats.disk_rejected += 1
            return None
        self.stats.disk_hits += 1
        return compiled

    def replace(self, graph: ir.Graph, key: PlanKey, device_index: int, handle: Any,
                failed: Compiled) -> Compiled:
        """The next plan for `graph` after `failed` failed to execute: built with every
        engine that failed so far deselected, kept in memory and on disk in its place.
        Raises when cuDNN has no other plan."""
        with self._lock:
            current = self._memory.get((key, device_index))
            if current is not None and current is not failed:
                return current  # another thread replaced it already
            failed_engines = failed.failed_engines | {failed.engine}
            compiled = self._build(graph, key, handle, failed.autotuned, failed_engines)
            self.stats.plans_replaced += 1
            self._memory[(key, device_index)] = compiled
            return compiled

    def _build(self, graph: ir.Graph, key: PlanKey, handle: Any, autotune: bool,
               failed_engines: frozenset[str] = frozenset()) -> Compiled:
        start = time.perf_counter()
        compiled, payload = self.compiler.build(graph, handle, autotune, key.tf32, failed_engines)
        self.stats.plans_built += 1
        self.stats.build_ms += (time.perf_counter() - start) * 1e3
        if payload is not None and self.store is not None:
            self.store.save(key, payload, compiled.meta())
        return compiled
