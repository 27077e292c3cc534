"""Views whose shape is computed from sizes read at run time (as traced Hugging Face and
torchvision models compute them) join fusion groups, and stay right at other sizes."""

from __future__ import annotations

import torch
from fusion_check import assert_matches, eager, fuse, group_kinds, run
from torch import nn

import torch_graphfuse
from torch_graphfuse.passes import shape_arguments
from torch_graphfuse.testing import runner


class Heads(nn.Module):
    """A projection split into heads with sizes read from `like` (its input by default)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(16, 32)

    def forward(self, x: torch.Tensor, like: torch.Tensor | None = None) -> torch.Tensor:
        like = x if like is None else like
        batch, seq = like.size(0), like.size(1)
        return self.fc(x).view(batch, seq, 4, -1).transpose(1, 2)


def _group_with(graph: torch._C.Graph, kind: str) -> list[str]:
    return next(kinds for kinds in group_kinds(graph) if kind in kinds)


def test_view_of_runtime_sizes_joins_the_group() -> None:
    model, x = Heads().eval(), torch.randn(2, 8, 16)
    _, out, graph = fuse(model, [x])
    assert_matches(out, eager(model, [x]), "fp32")
    kinds = _group_with(graph, "aten::linear")
    assert {"aten::view", "aten::transpose", "aten::size"} <= set(kinds), graph
    assert "aten::view" not in runner.unfused_kinds(graph)


def test_view_of_runtime_sizes_at_a_new_size_gives_eagers_shape() -> None:
    model = Heads().eval()
    module, _, _ = fuse(model, [torch.randn(2, 8, 16)])
    for x in (torch.randn(3, 5, 16), torch.randn(2, 8, 16)):
        out = run(module, [x])
        assert out.shape == (x.shape[0], 4, x.shape[1], 8)
        assert_matches(out, eager(model, [x]), "fp32")


def test_sizes_of_another_tensor_are_guarded() -> None:
    """The view reads the sizes of a tensor the group does not compute: the group takes it as
    an input whose sizes it pins, so other sizes of it alone give eager's other shape."""
    model = Heads().eval()
    x, like = torch.randn(2, 8, 16), torch.randn(2, 8)
    module, out, graph = fuse(model, [x, like])
    assert_matches(out, eager(model, [x, like]), "fp32")
    group = next(g for g in runner.fusion_groups(graph)
                 if "aten::view" in [n.kind() for n in g.g("Subgraph").nodes()])
    assert group.i("shape_inputs") == 1
    torch_graphfuse.reset_kernel_stats()
    other = torch.randn(4, 4)  # same number of elements: the view would succeed either way
    out = run(module, [x, other])
    assert out.shape == (4, 4, 4, 8)
    assert_matches(out, eager(model, [x, other]), "fp32")
    assert torch_graphfuse.kernel_stats()["respecialized_runs"] == 1


class SharedShape(nn.Module):
    """Two views of one shape list: each gets its own copy of the arithmetic."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(16, 32), nn.Linear(16, 32)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        shape = [x.size(0), x.size(1), 4, -1]
        return self.a(x).view(shape).transpose(1, 2), self.b(x).view(shape).transpose(1, 2)


def test_shared_shape_arithmetic_is_copied_for_each_view() -> None:
    model, x = SharedShape().eval(), torch.randn(2, 8, 16)
    _, out, graph = fuse(model, [x])
    assert_matches(out, eager(model, [x]), "fp32")
    assert runner.unfused_kinds(graph).count("aten::view") == 0, graph


class HeadsOfComputedWidth(Heads):
    """Heads of width // 4: integer division of a size, which tracing keeps as 0-dim tensors
    (prim::NumToTensor, aten::floor_divide, aten::Int)."""

    def forward(self, x: torch.Tensor, like: torch.Tensor | None = None) -> torch.Tensor:
        y = self.fc(x)
        batch, seq, width = y.size()
        return y.view(batch, seq, 4, width // 4).transpose(1, 2)


def test_size_arithmetic_through_0_dim_tensors() -> None:
    model, x = HeadsOfComputedWidth().eval(), torch.randn(2, 8, 16)
    module, out, graph = fuse(model, [x])
    assert_matches(out, eager(model, [x]), "fp32")
    assert "aten::floor_divide" in _group_with(graph, "aten::view"), graph
    other = torch.randn(1, 5, 16)
    assert_matches(run(module, [other]), eager(model, [other]), "fp32")


class ScaledScores(nn.Module):
    """DeBERTa's attention scale, computed from the head size at run time as a 0-dim tensor:
    `sqrt(tensor(q.size(-1), dtype=float) * 3)`."""

    def forward(self, q: torch.Tensor, k_t: torch.Tensor) -> torch.Tensor:
        scale = torch.sqrt(torch.tensor(q.size(-1), dtype=torch.float) * 3)
        return torch.matmul(q, k_t) / scale.to(dtype=q.dtype)


def test_scale_computed_from_sizes_joins_the_product() -> None:
    model = ScaledScores().eval()
    q, k = torch.randn(2, 4, 8, 16), torch.randn(2, 4, 16, 8)
    module, out, graph = fuse(model, [q, k])
    assert_matches(out, eager(model, [q, k]), "fp32")
    kinds = _group_with(graph, "aten::matmul")
    assert {"aten::div", "aten::sqrt"} <= set(kinds), graph
    # The scale reads the last size only: other token counts run fused.
    torch_graphfuse.reset_kernel_stats()
    q, k = torch.randn(2, 4, 5, 16), torch.randn(2, 4, 16, 5)
    assert_matches(run(module, [q, k]), eager(model, [q, k]), "fp32")
    assert torch_graphfuse.kernel_stats()["fallbacks"] == 0


def test_scale_at_another_head_size_is_eagers() -> None:
    model = ScaledScores().eval()
    module, _, _ = fuse(model, [torch.randn(2, 4, 8, 16), torch.randn(2, 4, 16, 8)])
    q, k = torch.randn(2, 4, 8, 32), torch.randn(2, 4, 32, 8)
    assert_matches(run(module, [q, k]), eager(model, [q, k]), "fp32")


class RotateHalf(nn.Module):
    """Llama's rotary half-swap: the two halves of the heads, sliced at a size halved at run
    time (the same arithmetic for both slices)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(16, 32)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        heads = self.fc(x).view(x.size(0), x.size(1), 4, -1).transpose(1, 2)
        half = heads.shape[-1] // 2
        return torch.cat((-heads[..., half:], heads[..., :half]), dim=-1)


def test_slices_at_a_halved_size_join_the_projection() -> None:
    model, x = RotateHalf().eval(), torch.randn(2, 8, 16)
    module, out, graph = fuse(model, [x])
    assert_matches(out, eager(model, [x]), "fp32")
    assert "aten::slice" in _group_with(graph, "aten::linear"), graph
    assert "aten::slice" not in runner.unfused_kinds(graph), graph
    other = torch.randn(3, 5, 16)
    assert_matches(run(module, [other]), eager(model, [other]), "fp32")


def test_a_view_of_its_inputs_own_sizes_leaves_the_group_open_to_other_sizes() -> None:
    """The view reads its batch and length from the linear's input: oneDNN infers them at
    any sizes (StaticReshape's special zero), so the group is not pinned and a new length
    compiles its partition, with no fusing again through the pipeline."""
    model = Heads().eval()
    module, _, graph = fuse(model, [torch.randn(2, 8, 16)])
    assert [g.i("static_shapes") for g in runner.fusion_groups(graph)] == [0]
    torch_graphfuse.reset_kernel_stats()
    for x in (torch.randn(2, 5, 16), torch.randn(3, 11, 16)):
        assert_matches(run(module, [x]), eager(model, [x]), "fp32")
    stats = torch_graphfuse.kernel_stats()
    assert stats["respecialized_runs"] == 0 and stats["fallbacks"] == 0
    assert stats["compiles"] == 2 and stats["fused_runs"] == 2


def _typed_view(shape_items: str, shape_nodes: str = "", source: str = "%x") -> torch._C.Node:
    graph = torch._C.parse_ir(f"""
        graph(%x : Float(2, 8, 32, strides=[256, 32, 1], device=cpu),
              %w : Float(32, 32, strides=[32, 1], device=cpu)):
          %zero : int = prim::Constant[value=0]()
          %one : int = prim::Constant[value=1]()
          %two : int = prim::Constant[value=2]()
          %four : int = prim::Constant[value=4]()
          %minus : int = prim::Constant[value=-1]()
          %none : NoneType = prim::Constant()
          %y : Float(2, 8, 32, strides=[256, 32, 1], device=cpu) = aten::linear(%x, %w, %none)
          %b : int = aten::size(%x, %zero)
          %s : int = aten::size(%x, %one)
          {shape_nodes}
          %shape : int[] = prim::ListConstruct({shape_items})
          %v : Tensor = aten::view({source}, %shape)
          return (%v)""")
    return next(n for n in graph.nodes() if n.kind() == "aten::view")


def test_generic_target_of_the_inputs_own_sizes() -> None:
    assert shape_arguments.generic_target(_typed_view("%b, %s, %four, %minus")) == [0, 0, 4, -1]


def test_generic_target_reads_sizes_through_a_linear() -> None:
    # Hugging Face's heads: the projection's rows have its input's batch and length.
    view = _typed_view("%b, %s, %four, %minus", source="%y")
    assert shape_arguments.generic_target(view) == [0, 0, 4, -1]


def test_generic_target_refuses_a_size_of_another_dim() -> None:
    assert shape_arguments.generic_target(_typed_view("%s, %b, %four, %minus")) is None


def test_generic_target_refuses_a_computed_size() -> None:
    view = _typed_view("%b, %half, %minus", shape_nodes="%half : int = aten::floordiv(%s, %two)")
    assert shape_arguments.generic_target(view) is None


def test_generic_target_refuses_a_literal_zero_size() -> None:
    # Under special_zero a 0 would copy the input's size instead of making an empty dim.
    assert shape_arguments.generic_target(_typed_view("%b, %zero, %minus")) is None

