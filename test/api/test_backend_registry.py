"""A backend is one class of `backends.base.Backend`'s shape plus a registry entry: a test
double that claims CPU tensors and runs each cumsum through a Python executor fuses, guards
and falls back through the shared passes and the real FusionGroup kernel."""

from __future__ import annotations

import torch
from fusion_check import eager, fuse, run

import torch_graphfuse
from torch_graphfuse.backends import registry
from torch_graphfuse.backends.base import BlockPartitioner, Executor, GraphFacts
from torch_graphfuse.fusion.partition import Partition


class CumsumBackend:
    """Each aten::cumsum a group of its own, run by `executor`."""

    name = "cumsum_double"
    offered_by = "the cumsum double"
    device_type = "cpu"
    op_table = {"aten::cumsum": None}

    def __init__(self) -> None:
        self.runs = 0
        self.finished: list[int] = []

    def available(self) -> bool:
        return True

    def partitioner(self, facts: GraphFacts) -> BlockPartitioner:
        def partition_block(block: torch._C.Block) -> list[Partition]:
            return [Partition([n], [n.inputsAt(0)], [n.output()], [n.inputsAt(0).unique()],
                              [n.output().unique()], "cumsum", False, frozenset(),
                              backend=self.name, offered_by=self.offered_by)
                    for n in block.nodes() if n.kind() == "aten::cumsum"]

        return partition_block

    def executor(self, desc: str) -> Executor:
        assert desc == "cumsum"

        def run(inputs: list[torch.Tensor]) -> list[torch.Tensor]:
            self.runs += 1
            return [torch.cumsum(inputs[0], 1)]

        return run

    def finish(self, graph: torch._C.Graph, groups: list[torch._C.Node]) -> None:
        self.finished.append(len(groups))


class ReluCumsum(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cumsum(torch.relu(x) * 2, 1)


def test_a_registered_backend_fuses_through_the_shared_passes_and_kernel() -> None:
    double = CumsumBackend()
    x = torch.randn(4, 8)
    with registry.claiming(double):
        module, _, graph = fuse(ReluCumsum(), [x])
        assert double.finished == [1]
        assert torch_graphfuse.last_report().groups == [["aten::cumsum"]]
        runs = double.runs
        assert torch.equal(run(module, [x]), eager(ReluCumsum(), [x]))
        assert double.runs == runs + 1
        # Another dtype misses the type guard: the subgraph runs unfused.
        x64 = x.double()
        assert torch.equal(run(module, [x64]), eager(ReluCumsum(), [x64]))
        assert double.runs == runs + 1


def test_claiming_a_device_type_takes_it_from_the_backend_that_had_it() -> None:
    double = CumsumBackend()
    before = [b.name for b in registry.backends()]
    with registry.claiming(double):
        cpu = [b.name for b in registry.backends() if b.device_type == "cpu"]
        assert cpu == [double.name]
        assert registry.by_name(double.name) is double
    assert [b.name for b in registry.backends()] == before
