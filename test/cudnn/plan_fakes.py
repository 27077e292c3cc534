"""Plans without cuDNN, for the plan and runtime tests: small IRs, their keys, a
compiler of fake plan bytes, and torch's TF32 flags set for a block."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from typing import Any

import torch

from torch_graphfuse.backends.cudnn import ir
from torch_graphfuse.backends.cudnn.plans.cache import Compiled
from torch_graphfuse.backends.cudnn.plans.key import PlanKey
from torch_graphfuse.backends.cudnn.plans.store import StoredPlan


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


def key_of(graph: ir.Graph, **changes: Any) -> PlanKey:
    key = PlanKey(graph.fingerprint(), "NVIDIA H100 80GB HBM3", 90, 132, 92800, "1.32.0")
    return dataclasses.replace(key, **changes)


def flip_last_byte(data: bytes) -> bytes:
    return data[:-1] + bytes([data[-1] ^ 0xFF])


class FakeCompiler:
    """Plans are bytes naming the graph and a build counter; loading checks the bytes."""

    def __init__(self) -> None:
        self.builds = 0
        self.loads = 0
        self.fail_loads = False

    def build(self, graph: ir.Graph, handle: Any, autotune: bool, tf32: bool,
              failed_engines: frozenset[str] = frozenset()
              ) -> tuple[Compiled, bytes | None]:
        self.builds += 1
        self.last_build = (tf32, failed_engines)
        engine = f"eng{len(failed_engines)}"
        payload = f"plan {graph.fingerprint()} #{self.builds} {engine}".encode()
        uids = {tid: 100 + tid for tid in (*graph.inputs, *graph.outputs)}
        return Compiled(payload, uids, 256, autotune, engine, failed_engines), payload

    def load(self, stored: StoredPlan, handle: Any) -> Compiled:
        self.loads += 1
        if self.fail_loads:
            raise RuntimeError("cuDNN refuses the plan")
        uids = {int(tid): int(uid) for tid, uid in stored.meta["uids"]}
        return Compiled(stored.payload, uids, 256, bool(stored.meta["autotuned"]),
                        stored.meta["engine"], frozenset(stored.meta["failed_engines"]))


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
