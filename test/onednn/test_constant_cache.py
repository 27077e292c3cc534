"""oneDNN's constant cache. It keeps a partition's constant buffers (reordered
weights, int8 scales and zero points) across executions, keyed by a hash of the
partition's id and the buffers' descriptors, mixed with its constant inputs'
addresses. With no constant input to mix in, that hash collides between
partitions whose ids differ by 1 (1 of 5000 one-group uint8 models came out
with another model's zero points), so int8 partitions without one compile with
the cache off; partitions with weights keep theirs cached."""

from __future__ import annotations

import pytest
import torch
import torch.ao.quantization.fx._decomposed  # noqa: F401 (registers quantized_decomposed)
from fusion_check import eager, fuse, run
from int8_models import Act
from torch import nn

import torch_graphfuse


class Requantize(nn.Module):
    """x -> u8 -> sigmoid(x) + x -> u8, each chain with its own zero points: one
    int8 group per chain, all of the same structure."""

    def __init__(self, chains: int) -> None:
        super().__init__()
        self.acts = [(Act(0.05, 20 + 3 * k), Act(0.03, 200 - 2 * k)) for k in range(chains)]

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        outs = []
        for k, (a_in, a_out) in enumerate(self.acts):
            a = a_in.qdq(x[k])
            outs.append(a_out.qdq(torch.sigmoid(a) + a))
        return tuple(outs)


def assert_within_a_step(outs: tuple[torch.Tensor, ...], refs: tuple[torch.Tensor, ...],
                         step: float) -> None:
    for k, (out, ref) in enumerate(zip(outs, refs, strict=True)):
        assert (out - ref).abs().max().item() <= step * 1.001, f"chain {k}"


@pytest.mark.usefixtures("int8_kernels")
def test_an_int8_group_without_weights_compiles_with_the_constant_cache_off() -> None:
    torch_graphfuse.reset_kernel_stats()
    model, x = Requantize(1), torch.randn(1, 2, 3, 4)
    module, out, _ = fuse(model, [x])
    assert_within_a_step(out, eager(model, [x]), 0.03)
    assert torch_graphfuse.kernel_stats()["uncached_constant_compiles"] >= 1


def test_groups_with_weights_compile_with_the_constant_cache_on() -> None:
    torch_graphfuse.reset_kernel_stats()
    model = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 8))
    fuse(model, [torch.randn(4, 16)])
    stats = torch_graphfuse.kernel_stats()
    assert stats["compiles"] > 0
    assert stats["uncached_constant_compiles"] == 0


@pytest.mark.usefixtures("int8_kernels")
@pytest.mark.parametrize("calls", [1, 3])
def test_int8_groups_alike_but_for_their_zero_points_each_keep_their_own(calls: int) -> None:
    # Partitioned together, their partitions take consecutive ids; with the cache off,
    # each recomputes its scales and zero points on every call.
    model, x = Requantize(48), torch.randn(48, 2, 3, 4)
    module, out, _ = fuse(model, [x])
    for _ in range(calls - 1):
        out = run(module, [x])
    assert_within_a_step(out, eager(model, [x]), 0.03)
