"""The incremental case builder the proposers grow a case with.

`Gen` runs every candidate op eagerly on the case's own inputs at both shapes
and keeps it only if eager accepts it and it is admissible, so shapes, dtypes
and in-place legality are those of real execution; it also offers the
proposers their ways of picking values and making constants.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import Tensor

from torch_graphfuse.testing.fuzz.evaluate import Evaluator, Meta, admissible, storage
from torch_graphfuse.testing.fuzz.inputs import gen_inputs, make_inputs
from torch_graphfuse.testing.fuzz.ops import KINDS
from torch_graphfuse.testing.fuzz.program import Program
from torch_graphfuse.testing.fuzz.spec import Case, Chooser, Op, chance, choice


class Reject(Exception):
    """The candidate op does not fit: the generator picks another."""


class Gen:
    """Builds a case op by op, running each candidate on the concrete inputs at
    both shapes and keeping it only if eager accepts it and it is admissible."""

    def __init__(self, c: Chooser, dtype: str, family: str | None = None) -> None:
        self.c, self.dtype = c, dtype
        self.inputs = gen_inputs(c, family)
        self.data_seed = c.integer(0, 1 << 16)
        self.ops: list[Op] = []
        self._restart()

    # -- evaluation ---------------------------------------------------------
    def case(self, outputs: Sequence[int] = ()) -> Case:
        return Case(self.dtype, self.inputs, list(self.ops), list(outputs), self.data_seed)

    def _restart(self) -> None:
        case = self.case()
        self.program = Program(len(self.inputs))
        seconds = [False, True] if case.has_second else [False]
        self.evals = [Evaluator(self.program, make_inputs(case, s)) for s in seconds]
        for op in self.ops:
            self.program.add_op(op)
            for ev in self.evals:
                ev.run(op)

    def emit(self, op: Op) -> int | None:
        """Append the op if it runs and is admissible at both shapes; its value id."""
        self.program.add_op(op)
        ran = 0
        try:
            for ev in self.evals:
                args = [ev.values[a] for a in op.args]
                if not admissible(op, args, [ev.meta[a] for a in op.args]):
                    raise Reject()
                if KINDS[op.kind].inplace and self._inplace_forbidden(ev, args[0]):
                    raise Reject()
                ran += 1
                ev.run(op)
        except Exception:
            self.program.pop_op()
            if KINDS[op.kind].inplace and ran:
                self._restart()  # a partial in-place run changed the environment
            else:
                for ev in self.evals[:ran]:
                    if len(ev.values) > len(self.inputs) + len(self.ops):
                        ev.pop()
            return None
        self.ops.append(op)
        return len(self.inputs) + len(self.ops) - 1

    def _inplace_forbidden(self, ev: Evaluator, target: Tensor) -> bool:
        """Writing into a module constant would change the model between calls."""
        return storage(target) in ev.const_storages

    # -- looking at values --------------------------------------------------
    @property
    def n(self) -> int:
        return len(self.inputs) + len(self.ops)

    def shape(self, v: int) -> tuple[int, ...]:
        return tuple(self.evals[0].values[v].shape)

    def shapes(self, v: int) -> list[tuple[int, ...]]:
        return [tuple(ev.values[v].shape) for ev in self.evals]

    def meta(self, v: int) -> Meta:
        return self.evals[0].meta[v]

    def dtype_of(self, v: int) -> torch.dtype:
        return self.evals[0].values[v].dtype

    def pick(self, pred: Callable[[int], bool] = lambda v: True, dep: bool = True) -> int | None:
        """A value satisfying `pred`, most often one of the latest (chains), else any."""
        cands = [v for v in range(self.n) if (self.meta(v).dep or not dep) and pred(v)]
        if not cands:
            return None
        if chance(self.c, 0.6):
            return cands[-1 - self.c.integer(0, min(2, len(cands) - 1))]
        return choice(self.c, cands)

    def all_finite(self, v: int) -> bool:
        return all(bool(torch.isfinite(ev.values[v]).all()) for ev in self.evals)

    def layer_ok(self, v: int) -> bool:
        """Layers hold fp32 weights: fp32 activations, or anything under autocast."""
        return self.dtype == "bf16" or self.dtype_of(v) == torch.float32

    def seed(self) -> int:
        return self.c.integer(0, 9999)

    def const(self, shape: Sequence[int]) -> int | None:
        return self.emit(Op("const", (), {"shape": tuple(shape), "seed": self.seed()}))
