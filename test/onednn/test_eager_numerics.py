"""Regression tests for results that once differed from eager with no error: dtypes
and rounding points, input layouts, op semantics at the edges (infinity, large
negatives, whole-number bucket boundaries) and runaway allocation. Each is named after
the defect it pins."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from fusion_check import (
    Program,
    assert_matches,
    eager,
    fuse,
    fused_and_eager,
    group_kinds,
    run,
    skip_unless_bf16_fuses,
)
from torch import nn

from torch_graphfuse import last_report
from torch_graphfuse.backends.onednn import partition as onednn_partition
from torch_graphfuse.testing import runner


def test_inplace_add_of_a_wider_dtype_keeps_self_dtype() -> None:
    # Found by the fuzzer: `a.add_(b)` with a bf16 and b f32 computes in f32 and
    # rounds into a's bf16; its functional form must cast back.
    def fn(self, x, y):  # noqa: ANN001, ANN202
        return torch.flip(x.to(torch.bfloat16), (1,)).add_(y) * 2.0

    x = torch.randn(5, 2, 1, 5)
    out, ref, _ = fused_and_eager(Program(fn), [x, x.clone()])
    assert out.dtype == ref.dtype == torch.bfloat16
    assert_matches(out, ref, "bf16")


def test_inplace_add_on_a_bf16_conv_result_under_autocast() -> None:
    model = Program(lambda self, x, y: self.conv(x).add_(y))
    model.conv = nn.Conv2d(3, 2, 3, dilation=(2, 1))
    out, ref, _ = fused_and_eager(model, [torch.randn(1, 3, 9, 7), torch.randn(1)], "bf16")
    assert out.dtype == ref.dtype == torch.bfloat16
    assert_matches(out, ref, "bf16")


def test_inplace_mul_of_a_wider_dtype_after_another_inplace_op_keeps_self_dtype() -> None:
    # Found by the fuzzer (seed 2796): in `y.sigmoid_(); y.mul_(x)` the product's functional
    # form reads sigmoid's functional result, not y, and the cast back to y's bf16 was
    # looked up by its inputs: it was missed, and the result came out float32.
    def fn(self, x, y):  # noqa: ANN001, ANN202
        out = self.fc(x)
        out.sigmoid_()
        return out.mul_(y)

    model = Program(fn)
    model.fc = nn.Linear(1, 4)
    out, ref, _ = fused_and_eager(model, [torch.randn(1, 3, 6, 1), torch.randn(1, 3, 6, 4)],
                                  "bf16")
    assert out.dtype == ref.dtype == torch.bfloat16
    assert_matches(out, ref, "bf16")


def test_new_shape_keeps_the_profiled_channels_last_output() -> None:
    # Found by the fuzzer: at a new batch size the conv's result came back
    # row-major, so the `.contiguous()` after it aliased it where eager copies.
    model = Program(lambda self, x: (self.conv(x).contiguous(), self.conv(x)))
    model.conv = nn.Conv2d(6, 6, (1, 3), (2, 1), (0, 1), groups=6)
    cl = torch.channels_last
    module, _, _ = fuse(model, [torch.randn(3, 6, 9, 2).to(memory_format=cl)])
    x = torch.randn(2, 6, 9, 2).to(memory_format=cl)
    (copy, out), (ref_copy, ref) = run(module, [x]), eager(model, [x])
    assert_matches((copy, out), (ref_copy, ref), "fp32")
    assert out.stride() == ref.stride()
    assert copy.data_ptr() != out.data_ptr()


def test_input_laid_out_otherwise_than_profiled_runs_unfused() -> None:
    # Found by the fuzzer: profiled with a (1, 5) input (row-major), called with
    # a transposed (3, 5) one, eager's results are transposed and the
    # `.contiguous()` copies; a row-major fused result made it an alias instead.
    def fn(self, x):  # noqa: ANN001, ANN202
        y = x / self.c - self.c
        view = y.t()
        z = y.contiguous().clamp_(-1.0, 1.0)
        return torch.cat([z.transpose(-1, -2), view], -1)

    model = Program(fn, c=torch.tensor([0.3]))
    module, _, _ = fuse(model, [torch.randn(5, 1).t()])
    x = torch.randn(5, 3).t() * 4
    out = run(module, [x])
    assert_matches(out, eager(model, [x]), "fp32")
    assert any("laid out otherwise" in why for _, why in last_report().unfused_specs())


@pytest.mark.parametrize("channels", [(5, 10, 5), (8, 16, 8)])
def test_bf16_depthwise_conv_with_a_channel_multiplier(channels) -> None:  # noqa: ANN001
    # Found by the fuzzer: oneDNN's bf16 kernel returns garbage for it on small inputs
    # (3.12: off by 2 to 3.7); it stays with ATen. On NCHW data, where eager's own
    # kernel is right (on channels-last data ATen runs the same broken kernel).
    cin, cout, groups = channels
    model = Program(lambda self, x: self.conv(x) * 2.0)
    model.conv = nn.Conv2d(cin, cout, (2, 2), (1, 2), (1, 0), groups=groups, bias=False)
    x = torch.randn(4, cin, 2, 2)
    out, ref, _ = fused_and_eager(model, [x], "bf16")
    assert_matches(out, ref, "bf16")
    exact = F.conv2d(x.bfloat16().double(), model.conv.weight.bfloat16().double(),
                     stride=(1, 2), padding=(1, 0), groups=groups) * 2.0
    torch.testing.assert_close(out.double(), exact, rtol=2e-2, atol=2e-2)


def test_pool_result_scaled_then_added_to_a_full_size_tensor() -> None:
    # Found by the fuzzer: `c + 2 * pool(x)` (add with alpha) puts a multiply
    # between the pool and the add; the full-size operand is still misread.
    model = Program(lambda self, x: torch.add(self.c, F.adaptive_avg_pool2d(x, (7, 1)), alpha=2),
                    c=torch.randn(2, 8, 7, 1))
    out, ref, _ = fused_and_eager(model, [torch.randn(2, 8, 7, 8)])
    assert_matches(out, ref, "fp32")


class GlobalPoolPlusPerSample(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, (1, 5), (1, 2), (0, 4), (2, 2))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        # The operand is another pool of y: (N, C, 1, 1), one value per sample and channel.
        y = self.conv(x)
        return F.adaptive_avg_pool2d(y, (1, 1)) + F.max_pool2d(y, (2, 1), 2, 0, 2), y


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_pool_result_added_to_a_per_sample_tensor(dtype: str) -> None:
    # Found by the fuzzer (seed 40): oneDNN 3.12's pooling post-op read a bf16 (N, C, 1, 1)
    # operand as garbage (4.6e13) for N > 1; profiled at N = 1, the group is pinned to it.
    model = GlobalPoolPlusPerSample().eval()
    for batch in (3, 1):
        x = torch.randn(batch, 3, 4, 1)
        module, out, _ = fuse(model, [x], dtype)
        assert_matches(out, eager(model, [x], dtype), dtype)
        other = torch.randn(2, 3, 4, 1)
        assert_matches(run(module, [other], dtype), eager(model, [other], dtype), dtype)


class GeluMinusOne(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([x, F.gelu(x) - 1.0], -1)


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_gelu_of_infinity_gives_eagers_result(dtype: str) -> None:
    # Found by the fuzzer's suite slice (bf16): ATen's gelu(+-inf) is NaN in its
    # AVX-512 kernel (and +inf in its AVX2 one, or on a single element), oneDNN's
    # GELU gives +inf or NaN by kernel: gelu maps on proven-finite inputs only,
    # and the result is whatever eager gives on this CPU.
    x = torch.randn(2, 4, 3)
    module, _, _ = fuse(GeluMinusOne(), [x], dtype)
    y = x.clone()
    y[0, 2, 0], y[1, 1, 2] = float("inf"), float("-inf")
    assert_matches(run(module, [y], dtype), eager(GeluMinusOne(), [y], dtype), dtype)


class RelativePositionBucket(nn.Module):
    """Hugging Face T5's _relative_position_bucket (bidirectional, 32 buckets, max
    distance 128) on a grid of relative positions."""

    def forward(self, relative_position: torch.Tensor) -> torch.Tensor:
        num_buckets, max_exact = 16, 8
        buckets = (relative_position > 0).to(torch.long) * num_buckets
        distance = torch.abs(relative_position)
        large = max_exact + (torch.log(distance.float() / max_exact) / math.log(128 / max_exact)
                             * (num_buckets - max_exact)).to(torch.long)
        large = torch.min(large, torch.full_like(large, num_buckets - 1))
        return buckets + torch.where(distance < max_exact, distance, large)


def test_relative_position_buckets_match_eager() -> None:
    # oneDNN's Log after a division is 3.4e-6 off: at distances 16, 32 and 64 the
    # exact value is a whole number, oneDNN's lands below it and the bucket one
    # lower. Values computed from integer data stay with ATen.
    positions = torch.arange(-128, 129).reshape(1, -1)
    _, out, graph = fuse(RelativePositionBucket(), [positions])
    assert torch.equal(out, RelativePositionBucket()(positions))
    assert not runner.fusion_groups(graph)
    assert any("integer data" in why for _, why in last_report().unmapped)


def test_layer_norm_plus_a_tensor_of_its_shape_keeps_the_sum() -> None:
    # Found checking the fuzzer's LayerNorm cases: oneDNN 3.12 fuses the add as a sum
    # post-op that its layer-norm kernel never applies (the result was layer_norm(a)).
    model = Program(lambda self, a, b: self.norm(a) + b)
    model.norm = nn.LayerNorm(32)
    inputs = [torch.randn(4, 8, 32), torch.randn(4, 8, 32)]
    for dtype in ("fp32", "bf16"):
        _, out, graph = fuse(model, inputs, dtype)
        assert_matches(out, eager(model, inputs, dtype), dtype)


def test_layer_norm_cast_to_bf16_plus_a_tensor_of_its_shape_keeps_the_sum() -> None:
    # Differential fuzzer, seed 2783 (fp32:2954), on AVX-512 with bf16: the cast becomes
    # the layer-norm kernel's destination type and the add its sum, dropped as above
    # (11-13 off). With both casts inside the graph, and with a bf16 input.
    model = Program(lambda self, a, b: self.norm(a).to(torch.bfloat16) + b.to(torch.bfloat16))
    model.norm = nn.LayerNorm(32)
    inputs = [3 * torch.randn(2, 8, 32), 3 * torch.randn(2, 8, 32)]
    _, out, _ = fuse(model, inputs)
    assert_matches(out, eager(model, inputs), "bf16")
    model = Program(lambda self, a, b: b + self.norm(a).to(torch.bfloat16))
    model.norm = nn.LayerNorm(32)
    inputs = [inputs[0], inputs[1].to(torch.bfloat16)]
    _, out, _ = fuse(model, inputs)
    assert_matches(out, eager(model, inputs), "bf16")


def test_layer_norm_plus_a_bias_keeps_the_sum_at_a_batch_of_one() -> None:
    # Differential fuzzer, seed 68: a (5,) bias broadcast over a (2, 5) layer_norm result
    # is right, but at a batch of 1 the bias has the sum's shape, and oneDNN 3.12 drops it
    # as above. The group is pinned to its profiled sizes.
    model = Program(lambda self, x: self.norm(x) + self.bias,
                    bias=torch.randn(5))
    model.norm = nn.LayerNorm(5, elementwise_affine=False)
    module, _, graph = fuse(model, [torch.randn(2, 5)])
    assert runner.fusion_groups(graph)
    for shape in [(2, 5), (1, 5), (3, 5)]:
        x = torch.randn(shape)
        assert_matches(run(module, [x]), eager(model, [x]), "fp32")


def test_layer_norm_plus_a_lower_rank_tensor_of_its_elements_keeps_the_sum() -> None:
    # Differential fuzzer, seed 2703 (fp32:302): profiled at a batch of 1, a (16,) operand
    # on a (1, 16) result is the sum's shape with numpy's alignment, and the sum was
    # dropped as above (the layer_norm alone came out).
    model = Program(lambda self, x: (lambda y: y.squeeze(0) + self.norm(y))(self.fc(x)))
    model.fc = nn.Linear(32, 16)
    model.norm = nn.LayerNorm(16, elementwise_affine=False)
    module, _, _ = fuse(model, [torch.randn(1, 32)])
    for shape in [(1, 32), (3, 32)]:
        x = torch.randn(shape)
        assert_matches(run(module, [x]), eager(model, [x]), "fp32")


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_softplus_of_large_negatives_stays_positive(dtype: str) -> None:
    # Found by the fuzzer (bf16 bmm -> softplus(beta=2) -> x / x): oneDNN's SoftPlus
    # returns 0 or -9.5e-7 where ATen's is tiny and positive, so x / x was NaN.
    model = Program(lambda self, a, b: (lambda s: s / s)(F.softplus(torch.bmm(a, b), beta=2.0)))
    torch.manual_seed(0)
    a, b = torch.randn(2, 4, 8) * 2, torch.randn(2, 8, 5) * 2
    _, out, _ = fuse(model, [a, b], dtype)
    assert_matches(out, eager(model, [a, b], dtype), dtype)


def _error_against_float64(model: nn.Module, out: torch.Tensor,
                           inputs: list[torch.Tensor]) -> float:
    exact = model.double()(*[t.double() for t in inputs])
    model.float()
    return (out.double() - exact).abs().max().item()


@pytest.mark.parametrize("case", ["repeated_values", "divided_per_row"])
def test_layer_norm_is_as_accurate_as_eagers(case: str) -> None:
    # The fuzzer's LayerNorm differences, on oneDNN 3.12: over rows of repeated values
    # (layer_norm(cat(x, x, x))) its JIT kernel is as accurate as ATen. Divided by a
    # per-row tensor, oneDNN took the division as a post-op of its generic layer norm,
    # 20 times further from float64 than eager (and 70 times slower): that stays with
    # ATen.
    torch.manual_seed(0)
    if case == "repeated_values":
        model = Program(lambda self, x: self.norm(torch.cat([x, x, x], -1)))
        model.norm = nn.LayerNorm(48, elementwise_affine=False)
        inputs = [torch.randn(8, 16)]
    else:
        model = Program(lambda self, x, d: self.norm(torch.cat([torch.cumsum(x, -1), x], -1)) / d)
        model.norm = nn.LayerNorm(8000, elementwise_affine=False)
        inputs = [torch.randn(8, 4000).abs() * 0.5, torch.rand(8, 1) + 0.01]
    _, out, _ = fuse(model, inputs)
    expected = eager(model, inputs)
    assert_matches(out, expected, "fp32")
    fused_error = _error_against_float64(model, out, inputs)
    assert fused_error <= 2 * _error_against_float64(model, expected, inputs) + 1e-7


@pytest.mark.parametrize("shape", [(1, 8, 32), (1, 4, 8, 32)])
def test_binary_chain_with_a_full_operand_then_two_per_channel_ones(shape) -> None:  # noqa: ANN001
    # Found by the zoo (MobileBERT's embeddings, then DeiT's, in bf16): oneDNN 3.12 ran
    # (x + pos + y) * w + b with relative error 1.0 on rank >= 3.
    model = Program(lambda self, x, y: ((x + self.pos) + y) * self.w + self.b)
    model.pos = nn.Parameter(torch.randn(shape))
    model.w, model.b = nn.Parameter(torch.randn(shape[-1])), nn.Parameter(torch.randn(shape[-1]))
    inputs = [torch.randn(shape), torch.randn(shape)]
    for dtype in ("fp32", "bf16"):
        _, out, _ = fuse(model, inputs, dtype)
        assert_matches(out, eager(model, inputs, dtype), dtype)


class NoNormBlock(nn.Module):
    """MobileBERT's `(x + r) * w + b`, a linear, then the same after it."""

    def __init__(self, width: int = 32) -> None:
        super().__init__()
        self.fc = nn.Linear(width, width)
        self.w1, self.b1 = nn.Parameter(torch.randn(width)), nn.Parameter(torch.randn(width))
        self.w2, self.b2 = nn.Parameter(torch.randn(width)), nn.Parameter(torch.randn(width))

    def forward(self, x: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
        h = (x + r) * self.w1 + self.b1
        return (self.fc(h) + r) * self.w2 + self.b2


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_width_chain_around_a_linear_fuses_in_two_groups_cut_at_the_linear(dtype: str) -> None:
    # oneDNN offers the whole block as one partition, which the workaround above refuses
    # (MobileBERT's 24 such blocks all stayed with ATen). Cut at the linear, each half is
    # one oneDNN computes right: the linear heads the second half's chain.
    model, inputs = NoNormBlock(), [torch.randn(1, 8, 32), torch.randn(1, 8, 32)]
    _, out, graph = fuse(model, inputs, dtype)
    assert_matches(out, eager(model, inputs, dtype), dtype)
    skip_unless_bf16_fuses(graph, dtype)
    kinds = [[k for k in group if k != "aten::to"] for group in group_kinds(graph)]  # bf16's
    assert sorted(kinds) == [["aten::add", "aten::add", "aten::linear", "aten::mul"],
                             ["aten::add", "aten::add", "aten::mul"]]


def test_split_is_kept_only_where_each_half_gives_what_the_other_reads() -> None:
    # ops 0 -> 1 -> 2 (the anchor) -> 3; op 3 also reads op 0's tensor 10. A first half
    # that keeps 10 inside (oneDNN partitions it seeing only its own ops) would leave the
    # second half without it: the whole partition stays as it was.
    ops = [SimpleNamespace(inputs=[1], outputs=[10]), SimpleNamespace(inputs=[10], outputs=[11]),
           SimpleNamespace(inputs=[11, 2], outputs=[12]),
           SimpleNamespace(inputs=[12, 10], outputs=[13])]
    backend = SimpleNamespace(ops=ops)
    whole = (True, [0, 1, 2, 3], [1, 2], [13])
    keeps = [(True, [0, 1], [1], [10, 11]), (True, [2, 3], [11, 2, 10], [13])]
    drops = [(True, [0, 1], [1], [11]), (True, [2, 3], [11, 2, 10], [13])]
    assert onednn_partition._keeps_outputs(backend, whole, keeps)
    assert not onednn_partition._keeps_outputs(backend, whole, drops)


class PermutedGram(nn.Module):
    """`v @ v.transpose(-1, -2)`, v = x.permute(1, 0, 2, 3): batch dims swapped in memory."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        v = x.permute(1, 0, 2, 3)
        return torch.matmul(v, v.transpose(-1, -2))


def test_product_with_swapped_batch_dims_and_a_dim_of_one_stays_with_aten() -> None:
    # Found by the fuzzer (seed 2779): at K = 1 oneDNN 3.12 was off by up to 16.
    model, x = PermutedGram(), torch.randn(8, 5, 9, 1)
    _, out, graph = fuse(model, [x])
    assert_matches(out, eager(model, [x]), "fp32")
    assert not runner.fusion_groups(graph)


def test_product_with_swapped_batch_dims_runs_fused_at_its_sizes_only() -> None:
    # Right at K = 2 (Swin's linears read their permuted windows so), pinned: another
    # size could bring K = 1.
    model, x = PermutedGram(), torch.randn(8, 5, 9, 2)
    module, out, graph = fuse(model, [x])
    assert_matches(out, eager(model, [x]), "fp32")
    (group,) = runner.fusion_groups(graph)
    assert group.i("static_shapes") == 1
    one = torch.randn(8, 5, 9, 1)
    assert_matches(run(module, [one]), eager(model, [one]), "fp32")


def _matmuls_fused(graph: torch._C.Graph) -> int:
    return sum(k == "aten::matmul" for group in group_kinds(graph) for k in group)


def test_product_broadcasting_an_operand_with_a_batch_dim_inside_its_matrix_stays_with_aten(
) -> None:
    # Found by the fuzzer (seed 2812): the first operand's batch dim of 4 lies between
    # its rows and columns in memory and the second broadcasts against its dim of 1;
    # oneDNN 3.12 read out of bounds (1e12 where eager gave -0.2).
    def fn(self, x):  # noqa: ANN001, ANN202
        return torch.matmul(x.permute(2, 0, 1, 3), x.transpose(-1, -2))

    x = torch.randn(1, 2, 4, 5)
    out, ref, graph = fused_and_eager(Program(fn), [x])
    assert_matches(out, ref, "fp32")
    assert _matmuls_fused(graph) == 0


def test_product_with_a_batch_dim_inside_the_matrix_and_swapped_batch_dims_stays_with_aten(
) -> None:
    # No dim broadcasts; the operand's batch dims of (4, 2) are stored as (dim 1, rows,
    # dim 0, columns): oneDNN 3.12 was wrong at 2 rows (a batch dim's size).
    def fn(self, x, y):  # noqa: ANN001, ANN202
        return torch.matmul(x.permute(2, 0, 1, 3), y)

    x, y = torch.randn(2, 2, 4, 5), torch.randn(4, 2, 5, 4)
    out, ref, graph = fused_and_eager(Program(fn), [x, y])
    assert_matches(out, ref, "fp32")
    assert _matmuls_fused(graph) == 0


def test_product_with_a_batch_dim_inside_the_matrix_runs_fused_at_its_sizes_only() -> None:
    # Batch dims outer to inner, both between rows and columns, nothing broadcast: right,
    # pinned (a size whose batch dim broadcasts would not be). Attention's heads, the last
    # batch dim, stay unpinned.
    class Pinned(nn.Module):
        def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            return torch.matmul(x.permute(1, 2, 0, 3), y)

    model = Pinned()
    x, y = torch.randn(2, 4, 2, 5), torch.randn(4, 2, 5, 4)
    module, out, graph = fuse(model, [x, y])
    assert_matches(out, eager(model, [x, y]), "fp32")
    (group,) = runner.fusion_groups(graph)
    assert group.i("static_shapes") == 1
    broadcast = [x, torch.randn(1, 2, 5, 4)]
    assert_matches(run(module, broadcast), eager(model, broadcast), "fp32")


def test_attention_scores_with_heads_inside_the_matrix_stay_fused_at_any_size() -> None:
    class Scores(nn.Module):
        def forward(self, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
            q, k = (t.view(1, t.size(1), 4, 8).permute(0, 2, 1, 3) for t in (q, k))
            return torch.matmul(q, k.transpose(-1, -2)) * 0.25

    model = Scores()
    q, k = torch.randn(1, 6, 32), torch.randn(1, 6, 32)
    module, out, graph = fuse(model, [q, k])
    assert_matches(out, eager(model, [q, k]), "fp32")
    assert _matmuls_fused(graph) == 1
    assert all(g.i("static_shapes") == 0 for g in runner.fusion_groups(graph))
