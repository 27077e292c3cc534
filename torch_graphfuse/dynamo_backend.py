"""torch.compile's backend "graphfuse": each graph Dynamo captures runs as a traced and
frozen TorchScript module, so its fusible regions run through torch_graphfuse.

    torch.compile(model, backend="graphfuse")

Dynamo hands over an FX graph whose inputs are the call's tensors, the parameters and
buffers of the modules it inlined (marked static) and, for a dynamic graph, sizes. Its
example inputs are fake, so the graph is traced at its first call: with copies of the
inputs, the parameters and buffers as module attributes (freezing folds them into
constants) and any sizes fixed. The profiling runs follow on copies, so only the user's
call touches the user's tensors. A dynamic graph gets one frozen module per input shape
(up to MAX_SHAPES), and a graph freezes again when a parameter or buffer it folded in
was replaced or changed in place.

A training graph (grad mode on and an input or parameter requiring grad) and one the
backend cannot take run as Dynamo's eager forward, with one line under this module's
log name (PYTORCH_JIT_LOG_LEVEL=dynamo_backend). stats() counts what happened.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import operator
import warnings
import weakref
from collections.abc import Callable, Hashable, Iterator, Sequence
from importlib.metadata import entry_points
from typing import Any

import torch
from torch import Tensor, nn
from torch._guards import CompileContext

from . import _C, log
from .group_schema import KIND

NAME = log.module_name(__file__)
BACKEND = "graphfuse"
ENTRY_POINT_GROUP = "torch_dynamo_backends"
MAX_SHAPES = 8  # frozen modules per dynamic graph; a graph meeting more runs eager
KEPT_GRAPHS = 16  # optimized graphs frozen_graphs() can return
STATS = ("graphs", "recompiles", "frozen", "refrozen", "eager")
# What a dynamic graph's non-tensor inputs may be at compile time; they are fixed per module.
_SCALARS = (int, float, bool, torch.SymInt, torch.SymFloat, torch.SymBool)

_stats: collections.Counter[str] = collections.Counter()
_recent: collections.deque[weakref.ref[Frozen]] = collections.deque(maxlen=KEPT_GRAPHS)


def stats() -> dict[str, int]:
    """Counts since the process started or reset_stats(): `graphs` Dynamo handed over
    (each side of a graph break, and each recompile, is one), `recompiles` (graphs of a
    frame compiled before: a guard failed, say on a new shape or grad mode), modules
    traced and `frozen` (one per graph, per input shape of a dynamic graph, and again after
    a parameter changed: `refrozen`), and graphs run `eager` (training, or not traceable)."""
    return {key: _stats[key] for key in STATS}


def reset_stats() -> None:
    """Zero stats() and forget the graphs frozen_graphs() returns."""
    _stats.clear()
    _recent.clear()


def frozen_graphs() -> list[torch._C.Graph]:
    """The optimized TorchScript graphs of the last modules frozen (oldest first), those
    still in use: what fused is in their graphfuse::FusionGroup nodes."""
    return [frozen.graph for ref in _recent if (frozen := ref()) is not None]


def register() -> None:
    """Make backend="graphfuse" resolve. An installed torch_graphfuse declares it as an
    entry point, which torch loads by name when first asked (and registers then, refusing
    a second registration); a source tree without that metadata registers it here, which
    imports torch._dynamo (about as long as importing torch)."""
    if entry_points(group=ENTRY_POINT_GROUP, name=BACKEND):
        return
    from torch._dynamo.backends.registry import register_backend

    register_backend(graphfuse, name=BACKEND)


def graphfuse(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
    """The backend: Dynamo calls it with each graph it captured and the graph's example
    inputs, and calls what it returns with the graph's inputs."""
    name = _received()
    why = _eager_reason(example_inputs)
    if why is not None:
        _stats["eager"] += 1
        log.dump(NAME, f"graph {name}: runs eager: {why}")
        return gm.forward
    return FrozenGraph(gm, example_inputs, name)


def _received() -> str:
    """Count a graph handed over; its compile id ("frame/compile") names it in the log."""
    compile_id = CompileContext.current_compile_id()
    _stats["graphs"] += 1
    if compile_id is not None and compile_id.frame_compile_id:
        _stats["recompiles"] += 1
    return str(compile_id)


def _eager_reason(example_inputs: Sequence[Any]) -> str | None:
    tensors = [x for x in example_inputs if isinstance(x, Tensor)]
    if torch.is_grad_enabled() and any(t.requires_grad for t in tensors):
        return "training (grad mode on and an input or parameter requires grad)"
    others = {type(x).__name__ for x in example_inputs if not isinstance(x, (Tensor, *_SCALARS))}
    if others:
        return f"inputs of a kind it cannot fix in a trace: {', '.join(sorted(others))}"
    devices = {t.device.type for t in tensors} - {"cpu"}
    if devices:
        return f"inputs on {', '.join(sorted(devices))} (torch_graphfuse fuses on the CPU)"
    return None


def _is_dynamic(example_inputs: Sequence[Any]) -> bool:
    return any(not isinstance(x, Tensor) or any(isinstance(d, torch.SymInt) for d in x.shape)
               for x in example_inputs)


def _picker(indices: Sequence[int]) -> Callable[[Sequence[Any]], tuple[Any, ...]]:
    """`lambda args: tuple(args[i] for i in indices)`, without the generator: it runs on
    every call."""
    if len(indices) > 1:
        return operator.itemgetter(*indices)
    if indices:
        (index,) = indices
        return lambda args: (args[index],)
    return lambda args: ()


_version = operator.attrgetter("_version")


@dataclasses.dataclass(eq=False)
class Frozen:
    """One traced and frozen module, and the parameters and buffers folded into it."""

    module: torch.jit.ScriptModule
    graph: torch._C.Graph  # the graph the profiling executor optimized
    statics: tuple[Tensor, ...]
    versioned: tuple[Tensor, ...]  # the statics that count versions (inference tensors do not)
    versions: tuple[int, ...]

    @classmethod
    def of(cls, module: torch.jit.ScriptModule, statics: tuple[Tensor, ...]) -> Frozen:
        versioned = tuple(t for t in statics if not t.is_inference())
        return cls(module, torch.jit.last_executed_optimized_graph(), statics, versioned,
                   tuple(map(_version, versioned)))

    def current(self, statics: tuple[Tensor, ...]) -> bool:
        """Whether `statics` are the tensors folded in, unchanged since."""
        return (all(map(operator.is_, statics, self.statics))
                and tuple(map(_version, self.versioned)) == self.versions)


class FrozenGraph:
    """What Dynamo calls for one graph: the frozen module of the inputs' signature (the
    only one of a static graph; a dynamic graph's input shapes and sizes), frozen at its
    first call and again after a static input changed."""

    def __init__(self, gm: torch.fx.GraphModule, example_inputs: Sequence[Any],
                 name: str) -> None:
        from torch._dynamo.utils import get_static_address_type

        self.gm, self.name = gm, name
        self.dynamic = _is_dynamic(example_inputs)
        self.statics = tuple(i for i, x in enumerate(example_inputs)
                             if get_static_address_type(x) is not None)
        self.runtime = tuple(i for i, x in enumerate(example_inputs)
                             if isinstance(x, Tensor) and i not in self.statics)
        self.scalars = tuple(i for i, x in enumerate(example_inputs) if not isinstance(x, Tensor))
        self.pick_statics, self.pick_runtime = _picker(self.statics), _picker(self.runtime)
        self.modules: dict[Hashable, Frozen] = {}
        self.eager = False

    def __call__(self, *args: Any) -> Any:
        if self.eager:
            return self.gm.forward(*args)
        key = self.signature(args) if self.dynamic else None
        frozen = self.modules.get(key)
        if frozen is None or not frozen.current(self.pick_statics(args)):
            frozen = self.freeze(key, args)
            if frozen is None:
                return self.gm.forward(*args)
        return _run(frozen.module, self.pick_runtime(args))

    def signature(self, args: Sequence[Any]) -> Hashable:
        """What a trace of a dynamic graph fixed: its tensors' shapes and its sizes."""
        return (tuple(args[i].shape for i in self.runtime), tuple(args[i] for i in self.scalars))

    def freeze(self, key: Hashable, args: Sequence[Any]) -> Frozen | None:
        """Trace and freeze for `args`; None (and eager from now on) where that fails."""
        again = key in self.modules
        if not again and len(self.modules) >= MAX_SHAPES:
            return self.give_up(f"more than {MAX_SHAPES} input shapes")
        try:
            frozen = _trace_and_freeze(self.gm, args, self.statics, self.runtime)
        except Exception as error:  # the graph still runs, eagerly
            return self.give_up(f"tracing and freezing failed: {_first_line(error)}")
        self.modules[key] = frozen
        _recent.append(weakref.ref(frozen))
        _stats["frozen"] += 1
        groups = len(frozen.graph.findAllNodes(KIND))
        if again:
            _stats["refrozen"] += 1
            log.dump(NAME, f"graph {self.name}: a parameter or buffer changed since freezing: "
                     f"frozen again, {groups} fusion groups")
        else:
            log.update(NAME, f"graph {self.name}: traced and frozen, {groups} fusion groups")
        return frozen

    def give_up(self, why: str) -> None:
        self.eager = True
        self.modules.clear()
        _stats["eager"] += 1
        log.dump(NAME, f"graph {self.name}: runs eager: {why}")


class _Bound(nn.Module):
    """The graph as a module of its runtime tensors alone: the static inputs are its
    buffers (copies while tracing: the trace runs the graph), the sizes are fixed."""

    def __init__(self, gm: torch.fx.GraphModule, args: Sequence[Any], statics: Sequence[int],
                 runtime: Sequence[int]) -> None:
        super().__init__()
        self.gm = gm
        self.fixed = [None if isinstance(a, Tensor) else a for a in args]
        self.statics, self.runtime = statics, runtime
        for i in statics:
            self.register_buffer(_attr(i), args[i].clone())
        self.versions = self.static_versions()

    def static_versions(self) -> list[int]:
        return [getattr(self, _attr(i))._version for i in self.statics]

    def forward(self, *tensors: Tensor) -> Any:
        args = list(self.fixed)
        for i, t in zip(self.runtime, tensors, strict=True):
            args[i] = t
        for i in self.statics:
            args[i] = getattr(self, _attr(i))
        return self.gm(*args)


def _attr(index: int) -> str:
    return f"static_{index}"


def _trace_and_freeze(gm: torch.fx.GraphModule, args: Sequence[Any], statics: Sequence[int],
                      runtime: Sequence[int]) -> Frozen:
    with _tracing():
        bound = _Bound(gm, args, statics, runtime).eval()
        traced = torch.jit.trace(bound, _copies(args, runtime), check_trace=False, strict=False)
        if bound.static_versions() != bound.versions:
            raise RuntimeError("the graph writes to a parameter or buffer")
        for i in statics:  # fold the user's tensors, not the copies traced with
            setattr(traced, _attr(i), args[i])
        module = torch.jit.freeze(traced)
    for _ in range(_runs_to_optimize()):
        _run(module, _copies(args, runtime))
    return Frozen.of(module, tuple(args[i] for i in statics))


@contextlib.contextmanager
def _tracing() -> Iterator[None]:
    """No grad, and out of inference mode: copies made there are ordinary tensors,
    whose versions tell whether the trace wrote to them. TorchScript's own autocast is off
    (eager autocast, where on, is traced into the graph). Warnings are dropped: the
    tracer's say what it fixed (the signature a module serves), and TorchScript's own
    deprecation notice (use torch.compile) would only puzzle a torch.compile user."""
    previous = torch._C._jit_set_autocast_mode(False)
    try:
        with torch.no_grad(), torch.inference_mode(False), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        torch._C._jit_set_autocast_mode(previous)


def _copies(args: Sequence[Any], runtime: Sequence[int]) -> tuple[Tensor, ...]:
    """Copies of the runtime tensors, same strides where dense: tracing and profiling
    run the graph, which may write to its inputs."""
    return tuple(args[i].clone() for i in runtime)


def _runs_to_optimize() -> int:
    """Calls until the profiling executor has optimized (and torch_graphfuse fused) the
    graph: its profiled runs, then a first run of the optimized graph."""
    return torch._C._jit_get_num_profiled_runs() + 1


def _run(module: torch.jit.ScriptModule, inputs: Sequence[Tensor]) -> Any:
    """Call with fusion on and TorchScript's own autocast off, as docs/bf16.md's TorchScript
    path runs, restoring both (other TorchScript modules in the process keep theirs)."""
    fusing = _C._is_enabled()
    jit_autocast = torch._C._jit_set_autocast_mode(False)
    _C._set_enabled(True)
    try:
        return module(*inputs)
    finally:
        _C._set_enabled(fusing)
        torch._C._jit_set_autocast_mode(jit_autocast)


def _first_line(error: Exception) -> str:
    lines = [line for line in str(error).splitlines() if line.strip()]
    return f"{type(error).__name__}: {lines[0] if lines else ''}"[:200]
