"""Running cuDNN fusion groups: the executor the FusionGroup kernel calls.

The kernel of a cuDNN group calls `group_executor(desc)` once (desc: the group's
IR as JSON), then the returned callable per run with the group's inputs in port
order, then the graph inputs its mapping assumes finite. The callable returns
the outputs as fresh CUDA tensors laid out as the IR's output tensors (dims and
strides), or none where the plan would differ from eager on those inputs (a plan
that is not known to keep NaN and infinities, on an input that holds one): that
run goes unfused. Whatever it raises, the kernel warns once and runs the group
unfused, so every check here raises rather than guesses.

Inputs are read as cuDNN reads them: the IR tensor's dims and strides over the
given tensor's memory from its data pointer (the interpreter's convention; the
kernel passes the tensors the graph has, e.g. a linear's (B, S, K) input for an
IR (1, B*S, K) operand). So an input must be a CUDA tensor on the group's device,
of the IR's dtype, 16-byte aligned, whose memory holds everything the IR's
strides reach. Whether that memory means what the lowering meant is the
kernel's type guard's business (it checks the profiled sizes and strides).

A run takes the plan of its device (plans/; chosen once per device, from
memory, disk or cuDNN), allocates outputs and workspace from torch's caching
allocator and executes on torch's current CUDA stream, with one cuDNN handle
per thread and device (a handle must not be shared across threads).

With TORCH_GRAPHFUSE_CUDNN_NATIVE=1, where the extension has the C++ executor
(built against a CUDA torch with the cuDNN frontend's headers: csrc/cudnn),
`group_executor` hands the kernel a CudnnNativeRunner instead: once this executor
has run a plan that needs no per-run check, it offers that plan (`native_offer`),
and the runner executes it from C++ with no GIL. Every run it cannot take (another
device or TF32 setting, an input it would refuse, a failed execute) still comes
here, so the checks, errors and replacements below hold for both. It is off unless
asked for until a GPU run has passed its tests (test_cudnn_gpu_native.py).

`set_executor_factory` / `executor_factory` swap what `group_executor` makes
(the CPU reference interpreter stands in for cuDNN in CPU end-to-end tests);
`stats()` counts plans and runs whatever the factory.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import torch

from ... import _C, config, log
from . import ir, special_values
from .frontend import load_cudnn
from .ir import TORCH_DTYPES
from .plans import key as plan_key
from .plans.cache import CacheStats, Compiled, PlanCache
from .plans.compiler import CudnnCompiler, autotune_enabled
from .plans.store import PlanStore, cache_dir

NAME = log.module_name(__file__)

Executor = Callable[[Sequence[torch.Tensor]], list[torch.Tensor]]
ExecutorFactory = Callable[[str], Executor]

# cuDNN's tensor descriptors promise 16-byte aligned pointers to its kernels.
ALIGNMENT = 16

NATIVE_ENV = config.CUDNN_NATIVE.env


class InputMismatch(ValueError):
    """An input cuDNN's plan cannot be run on."""


# -- inputs ------------------------------------------------------------------------------


@dataclass(frozen=True)
class InputSpec:
    """What the plan reads through one input port."""

    tensor_id: int
    dims: tuple[int, ...]
    strides: tuple[int, ...]
    dtype: torch.dtype

    @staticmethod
    def of(t: ir.Tensor) -> InputSpec:
        return InputSpec(t.id, tuple(t.dims), tuple(t.strides), TORCH_DTYPES[t.dtype])

    def check(self, given: Any, port: int) -> None:
        """Raise InputMismatch unless cuDNN may read this spec from `given`'s memory."""
        where = f"input {port} (IR tensor {self.tensor_id})"
        if not isinstance(given, torch.Tensor):
            raise InputMismatch(f"{where}: got {type(given).__name__}, not a tensor")
        if given.dtype != self.dtype:
            raise InputMismatch(f"{where}: dtype {given.dtype}, the plan reads {self.dtype}")
        if given.data_ptr() % ALIGNMENT:
            raise InputMismatch(f"{where}: data not {ALIGNMENT}-byte aligned")
        room = given.untyped_storage().nbytes() // given.element_size() - given.storage_offset()
        if ir.extent(self.dims, self.strides) > room:
            raise InputMismatch(f"{where}: dims {list(self.dims)} strides {list(self.strides)} "
                                f"reach past the {room} elements of the given memory")


def check_inputs(specs: Sequence[InputSpec], inputs: Sequence[Any]) -> torch.device:
    """The device the inputs share; InputMismatch unless all of them are fit to run."""
    if len(inputs) != len(specs):
        raise InputMismatch(f"the plan takes {len(specs)} inputs, got {len(inputs)}")
    device: torch.device | None = None
    for port, (spec, given) in enumerate(zip(specs, inputs, strict=True)):
        spec.check(given, port)
        if given.device.type != "cuda":
            raise InputMismatch(f"input {port}: on {given.device}, cuDNN runs on CUDA")
        if device is None:
            device = given.device
        elif given.device != device:
            raise InputMismatch(f"input {port}: on {given.device}, input 0 on {device}")
    if device is None:
        raise InputMismatch("a group without inputs has no device to run on")
    return device


# -- handles and the plan cache -----------------------------------------------------------


_handles = threading.local()


def _handle(device_index: int) -> Any:
    """This thread's cuDNN handle on the device (the current one), made on first
    use and kept for the thread's life."""
    by_device = _handles.__dict__.setdefault("by_device", {})
    handle = by_device.get(device_index)
    if handle is None:
        handle = by_device[device_index] = load_cudnn().create_handle()
    return handle


_cache_lock = threading.Lock()
_cache: PlanCache | None = None


def plan_cache() -> PlanCache:
    """The process's plan cache, on disk under cache_dir() as it is at first use."""
    global _cache
    with _cache_lock:
        if _cache is None:
            _cache = PlanCache(CudnnCompiler(), PlanStore(cache_dir()))
        return _cache


# -- the cuDNN executor -------------------------------------------------------------------


class CudnnExecutor:
    """One group's runs: its IR parsed once, its plan found once per device and TF32
    setting."""

    # Plans tried after the first fails to execute, before the group runs unfused: each
    # is a rebuild, seconds where NVRTC compiles it.
    MAX_REPLACEMENTS = 3

    def __init__(self, desc: str) -> None:
        self.graph = ir.Graph.from_json(desc)
        self.specs = [InputSpec.of(self.graph.tensor(tid)) for tid in self.graph.inputs]
        self.outputs = [self.graph.tensor(tid) for tid in self.graph.outputs]
        self._plans: dict[tuple[int, bool], tuple[plan_key.PlanKey, Compiled]] = {}
        # Why cuDNN gave no plan, per device and TF32 setting: asking again on every
        # run would cost each unfused run the heuristics' milliseconds.
        self._refusals: dict[tuple[int, bool], str] = {}
        # What the C++ runner may run without calling back (read after each run it
        # sends here): None, or (generation, C++ plan, plan_key.tf32_flag, TF32
        # setting, the frontend uids of the ports, inputs then outputs).
        self.native_offer: tuple[int, Any, int, bool, list[int]] | None = None
        self.offers_native = False  # set where a CudnnNativeRunner runs this executor
        self._generation = 0
        self._offered: Compiled | None = None

    def plan_for(self, device_index: int, handle: Any) -> tuple[plan_key.PlanKey, Compiled]:
        # Read on every run: eager follows a change of torch's TF32 flags at once.
        slot = (device_index, plan_key.tf32_allowed(self.graph))
        found = self._plans.get(slot)
        if found is not None:
            return found
        refusal = self._refusals.get(slot)
        if refusal is not None:
            raise RuntimeError(f"cuDNN has no plan for this group: {refusal}")
        try:
            key = plan_key.device_key(self.graph, device_index)
            compiled = plan_cache().get(self.graph, key, device_index, handle,
                                        autotune_enabled())
        except Exception as error:
            self._refusals[slot] = f"{type(error).__name__}: {error}"
            raise
        self._plans[slot] = (key, compiled)
        return key, compiled

    def _execute(self, compiled: Compiled, inputs: Sequence[torch.Tensor],
                 device: torch.device, handle: Any) -> list[torch.Tensor]:
        outputs = [torch.empty_strided(t.dims, t.strides, dtype=TORCH_DTYPES[t.dtype],
                                       device=device) for t in self.outputs]
        pack = {compiled.uids[tid]: x for tid, x in zip(self.graph.inputs, inputs, strict=True)}
        pack.update((compiled.uids[t.id], y) for t, y in zip(self.outputs, outputs, strict=True))
        workspace = (torch.empty(compiled.workspace_size, dtype=torch.uint8, device=device)
                     if compiled.workspace_size else None)
        with compiled.lock:
            compiled.graph.execute(pack, workspace, handle=handle)
        return outputs

    def _admits(self, compiled: Compiled, ports: Sequence[torch.Tensor],
                assumed_finite: Sequence[torch.Tensor], device: torch.device,
                handle: Any) -> bool:
        """Whether this run may use `compiled`: always where the plan is known to give
        eager's NaN and infinities (special_values: asked once per plan, of graphs where
        the answer holds for every input), else only on finite inputs, which takes a host
        read of the device's answer."""
        if not assumed_finite:
            return True
        if compiled.keeps_special_values is None:
            keeps = special_values.keeps_special_values(
                self.graph, lambda xs: self._execute(compiled, xs, device, handle), ports)
            compiled.keeps_special_values = keeps
            log.update(NAME, f"plan {compiled.engine or '?'} "
                             f"{'gives' if keeps else 'is not known to give'} eager's NaN and "
                             f"infinities{'' if keeps else ': its inputs are checked per run'}")
        if compiled.keeps_special_values:
            return True
        # One read for all of them: each read waits for the device.
        return bool(torch.stack([torch.isfinite(x).all().to(device)
                                 for x in assumed_finite]).all())

    def __call__(self, inputs: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        """The outputs; none where the plan would differ from eager on an input assumed
        finite (the kernel then runs the group unfused)."""
        ports, assumed_finite = inputs[:len(self.specs)], inputs[len(self.specs):]
        device = check_inputs(self.specs, ports)
        cudnn = load_cudnn()
        index = device.index if device.index is not None else torch.cuda.current_device()
        # cuDNN calls on a handle must come with its device current; the JIT does
        # not switch devices for a custom op.
        with torch.cuda.device(index):
            handle = _handle(index)
            # cuDNN launches on the handle's stream: make it torch's, as eager would
            # run. The raw getter costs well under a microsecond; current_stream()
            # builds an object, a few microseconds on every run.
            cudnn.set_stream(handle, torch._C._cuda_getCurrentRawStream(index))
            key, compiled = self.plan_for(index, handle)
            outputs = self.run_replacing(
                index, key, compiled, handle,
                lambda plan: self._execute(plan, ports, device, handle)
                if self._admits(plan, ports, assumed_finite, device, handle) else [])
            if outputs and self.offers_native:
                self.offer_native(index, key.tf32, checks_inputs=bool(assumed_finite))
            return outputs

    def offer_native(self, device_index: int, tf32: bool, checks_inputs: bool) -> None:
        """Offer the plan that has just run on (device, TF32 setting) to the C++ runner,
        unless it is the one offered last; none where a run of it may need the per-run
        check of the inputs assumed finite, or it has no C++ copy."""
        found = self._plans.get((device_index, tf32))
        if found is None or found[1] is self._offered:
            return
        compiled = self._offered = found[1]
        plan = None
        if not checks_inputs or compiled.keeps_special_values:
            plan = native_plan(device_index, compiled)
        if plan is None:
            self.native_offer = None
            return
        self._generation += 1
        uids = [compiled.uids[tid] for tid in (*self.graph.inputs, *self.graph.outputs)]
        self.native_offer = (self._generation, plan, plan_key.tf32_flag(self.graph), tf32, uids)

    def run_replacing(self, device_index: int, key: plan_key.PlanKey, compiled: Compiled,
                      handle: Any, run: Callable[[Compiled], list[torch.Tensor]]
                      ) -> list[torch.Tensor]:
        """`run(compiled)`; where it raises, again with the next plan, up to
        MAX_REPLACEMENTS times. When that fails too, the slot is refused: later runs go
        unfused at once instead of rebuilding plans on every call."""
        slot = (device_index, key.tf32)
        for attempt in range(self.MAX_REPLACEMENTS + 1):
            try:
                return run(compiled)
            except Exception as error:
                failure = error
            if attempt == self.MAX_REPLACEMENTS:
                break
            log.debug(NAME, f"plan {compiled.engine or '?'} fails to execute, trying the "
                            f"next: {failure}")
            try:
                compiled = plan_cache().replace(self.graph, key, device_index, handle, compiled)
            except Exception as no_plan:
                failure = no_plan
                break
            self._plans[slot] = (key, compiled)
        self._plans.pop(slot, None)
        self._refusals[slot] = f"{type(failure).__name__}: {failure}"
        raise failure


def native_plan(device_index: int, compiled: Compiled) -> Any:
    """The C++ executor's copy of `compiled` (its serialized plan read back on the
    device), made once per plan; None where this build has no C++ executor or the plan
    does not serialize."""
    if compiled.native is None:
        make = getattr(_C, "CudnnNativePlan", None)
        compiled.native = False
        if make is not None:
            try:
                compiled.native = make(device_index, bytes(compiled.graph.serialize(as_bytes=True)))
            except Exception as error:
                log.debug(NAME, f"plan {compiled.engine or '?'} runs through Python only: {error}")
    return compiled.native or None


def native_available() -> bool:
    """Whether this extension has the C++ executor and it can run in this process (it
    uses the process's shared libstdc++)."""
    return hasattr(_C, "CudnnNativeRunner") and bool(_C._uses_shared_libstdcxx())


def native_enabled() -> bool:
    """Whether groups made now run their settled plan from C++:
    TORCH_GRAPHFUSE_CUDNN_NATIVE=1 and native_available()."""
    return config.value(config.CUDNN_NATIVE) == "1" and native_available()


# -- the factory the kernel calls ----------------------------------------------------------


@dataclass
class _RunStats:
    executions: int = 0
    failures: int = 0
    declined: int = 0  # runs left unfused: an input assumed finite was not


_run_stats = _RunStats()
_stats_lock = threading.Lock()
_factory: ExecutorFactory = CudnnExecutor


def group_executor(desc: str) -> Executor:
    """The callable that runs the group described by `desc` (the IR JSON), made by the
    current factory. Failures to make or run it are counted and raised."""
    try:
        executor = _factory(desc)
    except Exception:
        _count(failures=1)
        raise

    def run(inputs: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        try:
            outputs = executor(inputs)
        except Exception as error:
            log.debug(NAME, f"a group fails, the kernel runs it unfused: {error}")
            _count(failures=1)
            raise
        _count(executions=1) if outputs else _count(declined=1)
        return outputs

    if isinstance(executor, CudnnExecutor) and native_enabled():
        executor.offers_native = True
        inputs = [(list(s.dims), list(s.strides), s.dtype) for s in executor.specs]
        outputs = [(list(t.dims), list(t.strides), TORCH_DTYPES[t.dtype]) for t in executor.outputs]
        return _C.CudnnNativeRunner(run, executor, inputs, outputs)
    return run


def _count(executions: int = 0, failures: int = 0, declined: int = 0) -> None:
    with _stats_lock:
        _run_stats.executions += executions
        _run_stats.failures += failures
        _run_stats.declined += declined


def set_executor_factory(factory: ExecutorFactory | None) -> ExecutorFactory:
    """Make `group_executor` use `factory` (None: cuDNN's); returns the previous one.
    Groups whose executor is already made keep it."""
    global _factory
    previous = _factory
    _factory = CudnnExecutor if factory is None else factory
    return previous


@contextlib.contextmanager
def executor_factory(factory: ExecutorFactory) -> Iterator[None]:
    """`factory` makes the executors inside the block."""
    previous = set_executor_factory(factory)
    try:
        yield
    finally:
        set_executor_factory(previous)


def stats() -> dict[str, float]:
    """plans_built, memory_hits, disk_hits, disk_rejected, build_ms (the plan cache's,
    this process), executions, failures and declined runs (through group_executor),
    and of the executions those the C++ executor ran (native_runs) and the C++
    executes that failed and went to Python (native_failures)."""
    with _stats_lock:
        runs = asdict(_run_stats)
    native = (_C._cudnn_native_stats() if hasattr(_C, "_cudnn_native_stats")
              else {"native_runs": 0, "native_failures": 0})
    runs["executions"] += native["native_runs"]
    cached = asdict(_cache.stats) if _cache is not None else asdict(CacheStats())
    return {**cached, **runs, **native}


def reset() -> None:
    """Zero the counts and forget the plan cache (the next use reads the cache
    folder again); the plans on disk stay."""
    global _cache
    with _stats_lock:
        _run_stats.executions = _run_stats.failures = _run_stats.declined = 0
    if hasattr(_C, "_cudnn_native_reset"):
        _C._cudnn_native_reset()
    with _cache_lock:
        _cache = None
