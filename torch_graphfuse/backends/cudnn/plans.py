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
and SM count, and the cuDNN and frontend versions, since a plan is valid only
for the graph, GPU and library it was built for. An entry on disk carries its
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
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

from ... import log
from . import ir
from .ir import TORCH_DTYPES

NAME = log.module_name(__file__)

FORMAT_VERSION = 1
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

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def digest(self) -> str:
        return hashlib.sha256(json.dumps(self.to_dict(), sort_keys=True).encode()).hexdigest()


def device_key(graph: ir.Graph, device_index: int) -> PlanKey:
    """The key of `graph`'s plan on CUDA device `device_index` with the installed cuDNN."""
    import torch

    from . import builder

    cudnn = builder.load_cudnn()
    props = torch.cuda.get_device_properties(device_index)
    return PlanKey(graph.fingerprint(), props.name, props.major * 10 + props.minor,
                   props.multi_processor_count, int(cudnn.backend_version()), cudnn.__version__)


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


@dataclass
class Compiled:
    """A plan ready to execute on one device."""

    graph: Any  # the built or deserialized cudnn.pygraph
    uids: dict[int, int]  # IR tensor id -> the frontend's uid, for the group's ports
    workspace_size: int
    autotuned: bool
    # A pygraph keeps per-call state: one execute at a time per plan.
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def meta(self) -> dict[str, Any]:
        return {"uids": sorted(self.uids.items()), "autotuned": self.autotuned}


class Compiler(Protocol):
    """Builds plans and reads serialized ones (CudnnCompiler; fakes in tests)."""

    def build(self, graph: ir.Graph, handle: Any, autotune: bool
              ) -> tuple[Compiled, bytes | None]: ...

    def load(self, stored: StoredPlan, handle: Any) -> Compiled: ...


@dataclass
class CacheStats:
    plans_built: int = 0
    memory_hits: int = 0
    disk_hits: int = 0
    disk_rejected: int = 0  # entries found on disk but not trusted or not loadable
    build_ms: float = 0.0


class PlanCache:
    """Plans in memory by (key, device), backed by a PlanStore (or none)."""

    def __init__(self, compiler: Compiler, store: PlanStore | None) -> None:
        self.compiler = compiler
        self.store = store
        self.stats = CacheStats()
        self._memory: dict[tuple[PlanKey, int], Compiled] = {}
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

    def _build(self, graph: ir.Graph, key: PlanKey, handle: Any, autotune: bool) -> Compiled:
        start = time.perf_counter()
        compiled, payload = self.compiler.build(graph, handle, autotune)
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

    def build(self, graph: ir.Graph, handle: Any, autotune: bool
              ) -> tuple[Compiled, bytes | None]:
        from . import builder

        cudnn = builder.load_cudnn()
        fe = builder.build(graph, handle=handle, device=self.device).graph
        modes = [cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK]
        if autotune:
            fe.validate()
            fe.build_operation_graph()
            fe.create_execution_plans(modes)
            fe.check_support()
            _select_fastest(fe, graph, handle)
        else:
            fe.build(modes)
        uids = {tid: builder.uid(tid) for tid in (*graph.inputs, *graph.outputs)}
        compiled = Compiled(fe, uids, int(fe.get_workspace_size()), autotune)
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
                        bool(stored.meta.get("autotuned")))


def _select_fastest(fe: Any, graph: ir.Graph, handle: Any) -> None:
    """Time the first AUTOTUNE_TOP_K plans on random inputs on the handle's stream
    (torch's current one) and select the fastest; plans that fail are skipped."""
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
    fe.build_plan_at_index(best[1])
