"""cuDNN execution plans for the IR's groups: chosen, cached in memory, kept on disk.

A plan is chosen by cuDNN's heuristics (mode A, then FALLBACK: the first plan of
that list that builds) or, with TORCH_GRAPHFUSE_CUDNN_AUTOTUNE=1, by timing the
first AUTOTUNE_TOP_K of that list on the device. Choosing is the slow part of a
group's first run, so plans are kept:
- in memory, per device, for the life of the process (PlanCache);
- on disk, as cuDNN's serialized plans (PlanStore), under
  TORCH_GRAPHFUSE_CACHE_DIR (default ~/.cache/torch_graphfuse/cudnn), so a second
  process starts without choosing again.

Both are keyed by PlanKey: the IR's fingerprint, the device's name, SM version
and SM count, the cuDNN and frontend versions, and whether TF32 is allowed, since
a plan is valid only for the graph, GPU, library and precision it was built for.
A plan is kept as cuDNN serialized it, with its engine id and knobs beside it,
never as an index into the heuristics' list (that list drifts between cuDNN
versions). The memory cache holds a plan only while a group uses it: when the
last group that runs it dies, cuDNN's plan is released.

Precision follows eager: engines that down-convert their inputs are never
chosen, and an fp32 group runs on tensor cores (TF32) only where eager would,
torch.backends.cudnn.allow_tf32 for a convolution and
torch.backends.cuda.matmul.allow_tf32 for a matmul.

A plan that fails to execute is replaced by the next one cuDNN offers for the
graph, the failed engines deselected (runtime.py retries), as torch's own cuDNN
convolutions do. An entry on disk carries its
key, a format version and a checksum of the plan bytes; anything that does not
match (a corrupt, truncated, foreign or older entry) is rebuilt and overwritten,
never handed to cuDNN. Entries are written to a temporary file and renamed, so a
reader never sees half of one.

Everything about keys, entries and the caches is plain Python over bytes and is
tested on CPU with fake plans; only CudnnCompiler talks to cuDNN.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
import tempfile
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

from ... import log
from . import ir
from .ir import TORCH_DTYPES

NAME = log.module_name(__file__)

FORMAT_VERSION = 2
MAGIC = b"TGFPLAN\0"
_HEADER_LEN = struct.Struct("<I")
CACHE_DIR_ENV = "TORCH_GRAPHFUSE_CACHE_DIR"
AUTOTUNE_ENV = "TORCH_GRAPHFUSE_CUDNN_AUTOTUNE"
AUTOTUNE_TOP_K = 8
AUTOTUNE_RUNS = 5


def cache_dir() -> Path:
    """Where plans are kept on disk: $TORCH_GRAPHFUSE_CACHE_DIR, else the user's
    cache folder ($XDG_CACHE_HOME or ~/.cache) / torch_graphfuse / cudnn."""
    chosen = os.environ.get(CACHE_DIR_ENV)
    if chosen:
        return Path(chosen).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "torch_graphfuse" / "cudnn"


def autotune_enabled() -> bool:
    return os.environ.get(AUTOTUNE_ENV, "0") not in ("", "0")


# -- keys -----------------------------------------------------------------------------


@dataclass(frozen=True)
class PlanKey:
    """What a plan is valid for."""

    ir_fingerprint: str
    device_name: str
    sm_version: int
    sm_count: int
    cudnn_version: int
    frontend_version: str
    tf32: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def digest(self) -> str:
        return hashlib.sha256(json.dumps(self.to_dict(), sort_keys=True).encode()).hexdigest()


def device_key(graph: ir.Graph, device_index: int) -> PlanKey:
    """The key of `graph`'s plan on CUDA device `device_index` with the installed cuDNN
    and torch's TF32 settings as they are now."""
    import torch

    from . import builder

    cudnn = builder.load_cudnn()
    props = torch.cuda.get_device_properties(device_index)
    return PlanKey(graph.fingerprint(), props.name, props.major * 10 + props.minor,
                   props.multi_processor_count, int(cudnn.backend_version()), cudnn.__version__,
                   tf32_allowed(graph))


def tf32_allowed(graph: ir.Graph) -> bool:
    """Whether eager would run this group's anchor in TF32: never outside fp32; a
    convolution as torch.backends.cudnn.allow_tf32 says (on by default), a matmul as
    torch.backends.cuda.matmul.allow_tf32 says (off by default)."""
    import torch

    if graph.io_dtype != "float":
        return False
    if any(node.op == "conv_fprop" for node in graph.nodes):
        return bool(torch.backends.cudnn.allow_tf32)
    return bool(torch.backends.cuda.matmul.allow_tf32)


def deselected_notes(graph: ir.Graph, tf32: bool) -> list[str]:
    """The numerical notes (cudnn.numerical_note names) of the engines this group must
    not run on: inputs down-converted to a narrower type, as eager never does, and, for
    an fp32 group where TF32 is not allowed, tensor cores (fp32 on tensor cores is TF32)."""
    notes = ["DOWN_CONVERT_INPUTS"]
    if graph.io_dtype == "float" and not tf32:
        notes.append("TENSOR_CORE")
    return notes


# -- entries on disk ------------------------------------------------------------------


class CorruptEntry(ValueError):
    """A stored plan that must not be trusted; the message says why."""


@dataclass(frozen=True)
class StoredPlan:
    payload: bytes  # the plan as cuDNN serialized it
    meta: dict[str, Any]  # what running it needs besides the bytes (see Compiled.meta)


def encode_entry(key: PlanKey, payload: bytes, meta: dict[str, Any]) -> bytes:
    """MAGIC | header length (u32 LE) | header (JSON) | payload."""
    header = json.dumps({"format": FORMAT_VERSION, "key": key.to_dict(), "meta": meta,
                         "payload_size": len(payload),
                         "payload_sha256": hashlib.sha256(payload).hexdigest()},
                        sort_keys=True).encode()
    return MAGIC + _HEADER_LEN.pack(len(header)) + header + payload


def decode_entry(data: bytes, key: PlanKey) -> StoredPlan:
    """The plan stored in `data` for `key`; CorruptEntry unless every check passes."""
    start = len(MAGIC) + _HEADER_LEN.size
    if len(data) < start or data[:len(MAGIC)] != MAGIC:
        raise CorruptEntry("not a torch_graphfuse plan entry")
    (header_len,) = _HEADER_LEN.unpack_from(data, len(MAGIC))
    if start + header_len > len(data):
        raise CorruptEntry("truncated header")
    try:
        header = json.loads(data[start:start + header_len])
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise CorruptEntry(f"unreadable header: {error}") from None
    if not isinstance(header, dict) or header.get("format") != FORMAT_VERSION:
        found = header.get("format") if isinstance(header, dict) else None
        raise CorruptEntry(f"entry format {found!r}, this version reads {FORMAT_VERSION}")
    if header.get("key") != key.to_dict():
        raise CorruptEntry("entry is for another key")
    payload = data[start + header_len:]
    if header.get("payload_size") != len(payload):
        raise CorruptEntry(f"plan is {len(payload)} bytes, the header says "
                           f"{header.get('payload_size')}")
    if header.get("payload_sha256") != hashlib.sha256(payload).hexdigest():
        raise CorruptEntry("plan bytes do not match their checksum")
    meta = header.get("meta")
    if not isinstance(meta, dict):
        raise CorruptEntry("entry has no meta")
    return StoredPlan(payload, meta)


class PlanStore:
    """Serialized plans in a folder, one file per key."""

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)

    def path(self, key: PlanKey) -> Path:
        return self.directory / f"{key.digest()}.plan"

    def load(self, key: PlanKey) -> StoredPlan | None:
        """The stored plan of `key`; None when there is none or it is not to be trusted."""
        path = self.path(key)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as error:
            log.debug(NAME, f"cannot read {path}: {error}")
            return None
        try:
            return decode_entry(data, key)
        except CorruptEntry as error:
            log.debug(NAME, f"ignoring {path}: {error}")
            return None

    def save(self, key: PlanKey, payload: bytes, meta: dict[str, Any]) -> bool:
        """Write the entry atomically (temporary file, then rename); False when the
        folder is not writable: the cache is an optimization, never a requirement."""
        data = encode_entry(key, payload, meta)
        tmp: str | None = None
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.directory, prefix=".tmp-", suffix=".plan")
            with os.fdopen(fd, "wb") as file:
                file.write(data)
                file.flush()
                os.fsync(file.fileno())
            os.replace(tmp, self.path(key))
            return True
        except OSError as error:
            log.debug(NAME, f"cannot write {self.path(key)}: {error}")
            if tmp is not None:
                Path(tmp).unlink(missing_ok=True)
            return False


# -- compiled plans and the cache -------------------------------------------------------


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

    def clear_memory(self) -> None:
        with self._lock:
            self._memory.clear()


# -- cuDNN -------------------------------------------------------------------------------


class CudnnCompiler:
    """Plans made by cuDNN through the frontend's Python API (imported on first use).

    `device` (a device_specs.DEVICES name) plans for a described GPU instead of the
    handle's: cuDNN's deviceless mode, where plans build and (de)serialize with no
    GPU present but never run."""

    def __init__(self, device: str | None = None) -> None:
        self.device = device

    def build(self, graph: ir.Graph, handle: Any, autotune: bool, tf32: bool,
              failed_engines: frozenset[str] = frozenset()
              ) -> tuple[Compiled, bytes | None]:
        from . import builder

        cudnn = builder.load_cudnn()
        fe = builder.build(graph, handle=handle, device=self.device).graph
        notes = deselected_notes(graph, tf32)
        fe.deselect_numeric_notes([getattr(cudnn.numerical_note, n) for n in notes])
        if failed_engines:
            fe.deselect_engines(sorted(failed_engines))
        fe.validate()
        fe.build_operation_graph()
        fe.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
        try:
            fe.check_support()
        except Exception as error:
            if "TENSOR_CORE" in notes:
                raise RuntimeError(
                    "cuDNN offers no plan that computes this fp32 group without TF32, and "
                    "TF32 is off for it (torch.backends.cuda.matmul.allow_tf32 for a matmul, "
                    f"torch.backends.cudnn.allow_tf32 for a convolution): {error}") from error
            raise
        index = _select_fastest(fe, graph, handle) if autotune else _build_first(fe)
        try:
            engine_id, knobs = fe.get_engine_and_knobs_at_index(index)
            config: list[Any] | None = [int(engine_id), {str(k): int(v) for k, v in knobs.items()}]
        except Exception:  # a plan the backend chose among candidates it does not expose
            config = None
        uids = {tid: builder.uid(tid) for tid in (*graph.inputs, *graph.outputs)}
        compiled = Compiled(fe, uids, int(fe.get_workspace_size()), autotune,
                            fe.get_plan_name_at_index(index), failed_engines, config)
        try:
            payload: bytes | None = bytes(fe.serialize(as_bytes=True))
        except Exception as error:  # the plan runs; only the disk cache goes without it
            log.debug(NAME, f"plan not serializable, not kept on disk: {error}")
            payload = None
        return compiled, payload

    def load(self, stored: StoredPlan, handle: Any) -> Compiled:
        from . import builder, device_specs

        cudnn = builder.load_cudnn()
        options = ({} if self.device is None
                   else {"device_property": device_specs.device_properties(self.device)})
        fe = cudnn.pygraph(handle=handle, **options)
        fe.deserialize(handle, stored.payload)
        uids = {int(tid): int(uid) for tid, uid in stored.meta["uids"]}
        return Compiled(fe, uids, int(fe.get_workspace_size()),
                        bool(stored.meta.get("autotuned")), str(stored.meta.get("engine", "")),
                        frozenset(stored.meta.get("failed_engines", ())),
                        stored.meta.get("engine_config"))


def _build_first(fe: Any) -> int:
    """Build the first plan of the heuristics' list that builds; its index."""
    errors = []
    for index in range(fe.get_execution_plan_count()):
        try:
            fe.select_plan(index)
            fe.build_plans()
        except Exception as error:  # deselected, or cuDNN declines to build it
            errors.append(f"plan {index}: {error}")
            continue
        return index
    raise RuntimeError("no plan of the heuristics' list builds: " + "; ".join(errors))


def _select_fastest(fe: Any, graph: ir.Graph, handle: Any) -> int:
    """Time the first AUTOTUNE_TOP_K plans on random inputs on the handle's stream
    (torch's current one), build the fastest and give its index; plans that fail
    are skipped."""
    import torch

    from . import builder

    cudnn = builder.load_cudnn()
    device = torch.device("cuda", torch.cuda.current_device())
    pack = {}
    for t in graph.tensors:
        if not t.virtual:
            buffer = torch.empty_strided(t.dims, t.strides, dtype=TORCH_DTYPES[t.dtype],
                                         device=device)
            pack[builder.uid(t.id)] = buffer.normal_() if t.id in graph.inputs else buffer
    declines = (cudnn.cudnnGraphNotSupportedError, NotImplementedError, RuntimeError)
    best: tuple[float, int] | None = None
    for index in range(min(fe.get_execution_plan_count(), AUTOTUNE_TOP_K)):
        try:
            fe.build_plan_at_index(index)
            workspace = torch.empty(fe.get_workspace_size_plan_at_index(index),
                                    dtype=torch.uint8, device=device)
            fe.execute_plan_at_index(pack, workspace, index, handle)  # warm-up
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(AUTOTUNE_RUNS):
                fe.execute_plan_at_index(pack, workspace, index, handle)
            end.record()
            end.synchronize()
        except declines as error:
            log.debug(NAME, f"autotune: plan {index} skipped: {error}")
            continue
        ms = start.elapsed_time(end) / AUTOTUNE_RUNS
        log.debug(NAME, f"autotune: plan {index} {fe.get_plan_name_at_index(index)}: {ms:.4f} ms")
        if best is None or ms < best[0]:
            best = (ms, index)
    if best is None:
        raise RuntimeError("autotune: no plan of the heuristics' list could run")
    fe.select_plan(best[1])
    fe.build_plans()
    return best[1]
