"""prepare_partitions: one oneDNN call partitions every group of a graph; each
kernel compiles its profiled spec from that partition, keeps its own weights,
and finds a partition of its own for any other spec."""

from __future__ import annotations

import pytest
import torch
from fusion_check import assert_matches, eager, fuse, run, skip_unless_bf16_fuses
from torch import nn

import torch_graphfuse
from torch_graphfuse.testing import runner


def same_layers() -> nn.Sequential:
    """Four structurally identical linear+relu groups with different weights:
    partitions prepared together must not share oneDNN's constant-weight cache."""
    torch.manual_seed(0)
    return nn.Sequential(*[m for _ in range(4) for m in (nn.Linear(32, 32), nn.ReLU())])


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_every_group_gets_a_prepared_partition(dtype: str) -> None:
    model, x = same_layers(), torch.randn(8, 32)
    torch_graphfuse.reset_kernel_stats()
    _, out, graph = fuse(model, [x], dtype)
    assert_matches(out, eager(model, [x], dtype), dtype)
    skip_unless_bf16_fuses(graph, dtype)
    groups = runner.fusion_groups(graph)
    assert len(groups) == 4
    assert all(g.hasAttribute("prepared") for g in groups)
    assert len({g.i("prepared") for g in groups}) == 4


def test_groups_with_the_same_structure_keep_their_own_weights() -> None:
    model, x = same_layers(), torch.randn(8, 32)
    module, out, _ = fuse(model, [x])
    assert_matches(out, eager(model, [x]), "fp32")
    for _ in range(2):  # the constant-weight cache serves the later calls
        y = torch.randn(8, 32)
        assert_matches(run(module, [y]), eager(model, [y]), "fp32")


def test_two_models_with_the_same_structure_keep_their_own_weights() -> None:
    first, second = same_layers(), same_layers()
    for p in second.parameters():
        p.data.mul_(-1.5)
    x = torch.randn(8, 32)
    a, out_a, _ = fuse(first, [x])
    b, out_b, _ = fuse(second, [x])
    assert_matches(out_a, eager(first, [x]), "fp32")
    assert_matches(out_b, eager(second, [x]), "fp32")
    assert_matches(run(a, [x]), eager(first, [x]), "fp32")


def test_another_spec_compiles_its_own_partition() -> None:
    model = same_layers()
    module, _, _ = fuse(model, [torch.randn(8, 32)])
    torch_graphfuse.reset_kernel_stats()
    y = torch.randn(3, 32)
    assert_matches(run(module, [y]), eager(model, [y]), "fp32")
    stats = torch_graphfuse.kernel_stats()
    assert stats["compiles"] == 4 and stats["fallbacks"] == 0


def test_compile_and_first_run_times_are_counted() -> None:
    torch_graphfuse.reset_kernel_stats()
    fuse(same_layers(), [torch.randn(8, 32)])
    stats = torch_graphfuse.kernel_stats()
    assert stats["compiles"] == 4
    assert stats["compile_us"] > 0 and stats["first_run_us"] > 0
    torch_graphfuse.reset_kernel_stats()
    assert torch_graphfuse.kernel_stats()["compile_us"] == 0
