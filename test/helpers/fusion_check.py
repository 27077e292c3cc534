"""The check every fuser test makes: fuse a model (fp32, or bf16 through eager
autocast as the seed describes), compare with eager, and report what fused."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
import torch

import torch_graphfuse
from torch_graphfuse.fusion.rewrite import group_kinds as group_kinds_of
from torch_graphfuse.testing import runner
from torch_graphfuse.testing.runner import precision

DTYPES = ["fp32", "bf16"]
TOLERANCE = {"fp32": dict(rtol=1e-4, atol=1e-5), "bf16": dict(rtol=2e-2, atol=2e-2)}


def fuse(model: torch.nn.Module, inputs: Sequence[torch.Tensor], dtype: str = "fp32",
         enabled: bool = True) -> tuple[torch.jit.ScriptModule, object, torch._C.Graph]:
    with precision(dtype):
        return runner.fused(model.eval(), inputs, enabled)


def eager(model: torch.nn.Module, inputs: Sequence[torch.Tensor], dtype: str = "fp32") -> object:
    with torch.no_grad(), precision(dtype):
        return model.eval()(*inputs)


def run(module: torch.jit.ScriptModule, inputs: Sequence[torch.Tensor],
        dtype: str = "fp32") -> object:
    with torch.no_grad(), precision(dtype), torch_graphfuse.fuser():
        return module(*inputs)


def assert_matches(out: object, ref: object, dtype: str) -> None:
    torch.testing.assert_close(out, ref, equal_nan=True, check_dtype=True, **TOLERANCE[dtype])


def check(model: torch.nn.Module, inputs: Sequence[torch.Tensor], dtype: str = "fp32",
          groups: int | None = None, left: Sequence[str] | None = ()) -> torch._C.Graph:
    """Fuse and compare with eager; assert the number of fusion groups (unless
    None) and the aten ops left outside them (sorted, with repeats; unless None)."""
    _, out, graph = fuse(model, inputs, dtype)
    assert_matches(out, eager(model, inputs, dtype), dtype)
    skip_unless_bf16_fuses(graph, dtype)
    if groups is not None:
        assert len(runner.fusion_groups(graph)) == groups, graph
    if left is not None:
        assert sorted(unfused(graph, dtype)) == sorted(left), graph
    return graph


def skip_unless_bf16_fuses(graph: torch._C.Graph, dtype: str) -> None:
    """On a CPU without bf16 instructions (AVX2: AMD Zen 2/3, Intel client parts) oneDNN has
    no bf16 kernels, and the plugin forms no group that computes in bf16: there, in bf16,
    check that and skip the rest of the test, which pins what a bf16 CPU fuses. Called
    after the comparison with eager."""
    if dtype != "bf16" or torch_graphfuse.onednn_info()["bf16"]:
        return
    bf16 = [g for g in runner.fusion_groups(graph) if " bf16 " in g.s("desc")]
    assert not bf16, graph
    pytest.skip("no oneDNN bf16 kernels on this CPU: matched eager unfused; the test pins "
                "what a bf16 CPU fuses")


def check_nonfinite_call(model: torch.nn.Module, inputs: Sequence[torch.Tensor],
                        nonfinite: Sequence[torch.Tensor], dtype: str = "fp32") -> torch._C.Graph:
    """Fuse on finite `inputs`, then call with `nonfinite` ones (NaN/inf): the
    groups that assume finite inputs run unfused, so the result is eager's,
    NaN positions included."""
    module, _, graph = fuse(model, inputs, dtype)
    torch_graphfuse.reset_kernel_stats()
    out = run(module, [t.clone() for t in nonfinite], dtype)
    assert_matches(out, eager(model, [t.clone() for t in nonfinite], dtype), dtype)
    skip_unless_bf16_fuses(graph, dtype)
    assert torch_graphfuse.kernel_stats()["nonfinite_fallbacks"] > 0
    return graph


def unfused(graph: torch._C.Graph, dtype: str) -> list[str]:
    """Aten ops left outside fusion groups; under bf16 autocast, less the casts
    autocast put on the graph's inputs (a lone cast is not worth a partition)."""
    kinds = runner.unfused_kinds(graph)
    return [k for k in kinds if k != "aten::to"] if dtype == "bf16" else kinds


def group_kinds(graph: torch._C.Graph) -> list[list[str]]:
    """The aten kinds of each fusion group, sorted, groups sorted."""
    return sorted(group_kinds_of(g) for g in runner.fusion_groups(graph))


class Program(torch.nn.Module):
    """A module whose forward is a function of (self, *inputs), with buffers."""

    def __init__(self, fn, **buffers: torch.Tensor) -> None:  # noqa: ANN001
        super().__init__()
        self.fn = fn
        for name, value in buffers.items():
            self.register_buffer(name, value)

    def forward(self, *xs: torch.Tensor) -> torch.Tensor:
        return self.fn(self, *xs)


def fused_and_eager(model: torch.nn.Module, inputs: list[torch.Tensor], dtype: str = "fp32"):  # noqa: ANN201
    """Fused output (inputs cloned), eager output (inputs cloned), the graph."""
    module, _, graph = fuse(model, [x.clone() for x in inputs], dtype)
    return run(module, [x.clone() for x in inputs], dtype), eager(model, [
        x.clone() for x in inputs], dtype), graph
