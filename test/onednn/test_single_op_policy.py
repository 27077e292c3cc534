"""Which lone ops become a partition of their own: the ones oneDNN runs faster
than ATen (conv, linear, matmul, pools, layer_norm, cat), not lone eltwise or
batch_norm, nor a lone softmax."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from fusion_check import DTYPES, check, check_nonfinite_call, eager, fuse, group_kinds
from torch import nn
from torch.nn import functional as F

import torch_graphfuse


class Fn(nn.Module):
    def __init__(self, fn: Callable[..., torch.Tensor]) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, *xs: torch.Tensor) -> torch.Tensor:
        return self.fn(*xs)


LONE_UNFUSED: dict[str, tuple[Callable[[torch.Tensor], torch.Tensor], str]] = {
    "relu": (torch.relu, "aten::relu"),
    "sigmoid": (torch.sigmoid, "aten::sigmoid"),
    "gelu": (F.gelu, "aten::gelu"),
    "softmax": (lambda x: torch.softmax(x, -1), "aten::softmax"),
    "log_softmax": (lambda x: torch.log_softmax(x, 1), "aten::log_softmax"),
}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", sorted(LONE_UNFUSED))
def test_lone_eltwise_and_softmax_stay_unfused(dtype: str, name: str) -> None:
    fn, kind = LONE_UNFUSED[name]
    check(Fn(fn), [torch.randn(2, 8, 5, 5)], dtype, groups=0, left=[kind])


@pytest.mark.parametrize("dtype", DTYPES)
def test_lone_batch_norm_stays_unfused(dtype: str) -> None:
    bn = nn.BatchNorm2d(8)
    with torch.no_grad():
        bn.running_var.uniform_(0.5, 2.0)
    check(bn, [torch.randn(2, 8, 5, 5)], dtype, groups=0, left=["aten::batch_norm"])


@pytest.mark.parametrize("dtype", DTYPES)
def test_softmax_joins_the_attention_partition_on_finite_inputs(dtype: str) -> None:
    # oneDNN's softmax keeps a row holding NaN or +inf finite where eager makes it
    # NaN: it maps on proven-finite inputs, and the group runs unfused on a NaN call.
    # At 192 tokens, where oneDNN's attention kernel is faster than ATen (at up to 112 the
    # softmax stays with ATen and the products fuse).
    model = Fn(lambda q, k, v, m: torch.matmul(
        torch.softmax(torch.matmul(q, k.transpose(-1, -2)) * 0.125 + m, -1), v))
    inputs = [torch.randn(2, 4, 192, 16), torch.randn(2, 4, 192, 16),
              torch.randn(2, 4, 192, 16), torch.randn(2, 1, 1, 192)]
    # Under bf16 autocast the softmax runs in fp32 between casts, outside the pattern.
    whole = dtype == "fp32"
    # k's transpose is a view only the product reads: the group makes it (its head).
    graph = check(model, inputs, dtype, groups=1 if whole else None,
                  left=[] if whole else None)
    assert not whole or "aten::softmax" in group_kinds(graph)[0]
    nan = inputs[0].clone()
    nan[1, 2, 3, 4] = float("nan")
    check_nonfinite_call(model, inputs, [nan, *inputs[1:]], dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_lone_softmax_stays_with_aten(dtype: str) -> None:
    model = Fn(lambda x, m: torch.softmax(x * 0.125 + m, -1))
    check(model, [torch.randn(2, 4, 8, 8), torch.randn(2, 1, 1, 8)], dtype, groups=1,
          left=["aten::softmax"])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kernel,stride,padding", [(2, 2, 0), (3, 2, 1)])
@pytest.mark.parametrize("ceil_mode", [False, True])
def test_max_pool2d_runs_unfused_on_nan_and_inf(dtype: str, kernel: int, stride: int,
                                                padding: int, ceil_mode: bool) -> None:
    # oneDNN's max pooling (v3.2 and 3.12) skips NaN and gives -FLT_MAX for -inf: it is
    # taken on a checked input, and a call with NaN or -inf runs unfused.
    model = Fn(lambda x: F.max_pool2d(x, kernel, stride, padding, ceil_mode=ceil_mode))
    x = torch.randn(2, 4, 11, 11)
    check(model, [x], dtype, groups=1, left=[])
    special = x.clone()
    special[0, 0, 0, 0], special[0, 1, :4, :4] = float("nan"), float("-inf")
    check_nonfinite_call(model, [x], [special], dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kernel,stride,padding", [(2, 2, 0), (3, 2, 1), (3, 1, 1)])
@pytest.mark.parametrize("ceil_mode", [False, True])
@pytest.mark.parametrize("count_include_pad", [False, True])
def test_avg_pool2d(dtype: str, kernel: int, stride: int, padding: int, ceil_mode: bool,
                    count_include_pad: bool) -> None:
    model = Fn(lambda x: F.avg_pool2d(x, kernel, stride, padding, ceil_mode=ceil_mode,
                                      count_include_pad=count_include_pad))
    x = torch.randn(2, 4, 11, 11)
    floor_size = (11 + 2 * padding - kernel) // stride + 1
    if ceil_mode and count_include_pad and model(x).shape[-1] != floor_size:
        # A ceil window past the padded input: torch's divisor is not oneDNN's.
        check(model, [x], dtype, groups=0, left=["aten::avg_pool2d"])
    else:
        graph = check(model, [x], dtype, groups=1, left=[])
        assert group_kinds(graph) == [["aten::avg_pool2d"]]


def test_avg_pool2d_divisor_override_stays_unfused() -> None:
    model = Fn(lambda x: F.avg_pool2d(x, 2, divisor_override=3))
    check(model, [torch.randn(1, 4, 8, 8)], groups=0, left=["aten::avg_pool2d"])


class ConvPool(nn.Module):
    def __init__(self, pool: nn.Module) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.pool = pool

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(torch.relu(self.conv(x)))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("pool", [nn.MaxPool2d(3, 2, 1), nn.AdaptiveAvgPool2d(1),
                                  nn.AdaptiveAvgPool2d((2, 4))], ids=str)
def test_conv_then_pool(dtype: str, pool: nn.Module) -> None:
    check(ConvPool(pool), [torch.randn(1, 3, 16, 16)], dtype, left=[])


def test_adaptive_pool_that_is_not_plain_stays_unfused() -> None:
    model = Fn(lambda x: F.adaptive_avg_pool2d(x, 3))
    check(model, [torch.randn(1, 4, 8, 8)], groups=0, left=["aten::adaptive_avg_pool2d"])


def _with_affine(norm: nn.Module) -> nn.Module:
    """Its weight and bias, where it has them, away from 1 and 0."""
    if norm.weight is not None:
        with torch.no_grad():
            norm.weight.uniform_(0.5, 1.5)
            norm.bias.uniform_(-0.5, 0.5)
    return norm


def _layer_norm(normalized: tuple[int, ...], affine: bool) -> nn.Module:
    return _with_affine(nn.LayerNorm(normalized, elementwise_affine=affine))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("affine", [True, False])
def test_layer_norm(dtype: str, affine: bool) -> None:
    graph = check(_layer_norm((16,), affine), [torch.randn(2, 4, 16)], dtype, groups=1, left=[])
    assert group_kinds(graph) == [["aten::layer_norm"]]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("missing", ["bias", "weight"])
def test_layer_norm_with_only_a_weight_or_a_bias(dtype: str, missing: str) -> None:
    """ModernBERT's layer norms have no bias: oneDNN takes both or neither, so the missing
    one is given as ones or -0.0, which change no value (a -0.0 result included)."""
    norm = _layer_norm((16,), True)
    setattr(norm, missing, None)
    x = torch.randn(2, 4, 16)
    x[0, 0] = 0.0  # a row of zeros normalizes to zeros: eager's sign of each zero
    graph = check(norm, [x], dtype, groups=1, left=[])
    assert group_kinds(graph) == [["aten::layer_norm"]]
    if dtype == "fp32":
        _, out, _ = fuse(norm, [x])
        assert torch.equal(out.signbit(), eager(norm, [x]).signbit())


@pytest.mark.parametrize("dtype", DTYPES)
def test_layer_norm_over_two_dims_stays_unfused(dtype: str) -> None:
    # oneDNN v3.2 normalized the last dim only; 3.12 refuses the partition.
    check(_layer_norm((4, 16), True), [torch.randn(2, 4, 16)], dtype, groups=0,
          left=["aten::layer_norm"])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("fmt", [torch.channels_last, torch.contiguous_format],
                         ids=["channels_last", "plain"])
def test_group_norm_of_a_large_mean_stays_with_aten(dtype: str,
                                                    fmt: torch.memory_format) -> None:
    # Fuzzer seed 2612, fp32 graph 1478 (values near 8 + 0.1 z, 9e-04 off). oneDNN 3.12's
    # one-pass variance gave 0.14 here, fused on channels-last; ATen is exact to rounding.
    x = (torch.randn(2, 16, 5, 5) + 1000.0).contiguous(memory_format=fmt)
    check(_with_affine(nn.GroupNorm(4, 16)), [x], dtype, groups=0, left=["aten::group_norm"])
    unmapped = dict(torch_graphfuse.last_report().unmapped)
    assert "variance in one pass" in unmapped["aten::group_norm"]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("dim", [0, 1, 2, 3, -1])
def test_cat_along_every_dim(dtype: str, dim: int) -> None:
    model = Fn(lambda a, b, c: torch.cat([a, torch.relu(b), c], dim))
    xs = [torch.randn(2, 3, 4, 5) for _ in range(3)]
    graph = check(model, xs, dtype, groups=1, left=None)
    assert any("aten::cat" in g for g in group_kinds(graph))
    assert "aten::cat" not in str(graph).split("block1")[0].split("FusionGroup")[0]


@pytest.mark.parametrize("dtype", DTYPES)
def test_cat_list_with_another_user_stays_unfused(dtype: str) -> None:
    def fn(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        xs = [a, b]
        return torch.cat(xs, 1), torch.stack(xs)

    check(Fn(fn), [torch.randn(2, 3), torch.randn(2, 3)], dtype, groups=0, left=None)


@pytest.mark.parametrize("dtype", DTYPES)
def test_mean_reduction(dtype: str) -> None:
    model = Fn(lambda x: torch.relu(x.mean((2, 3), keepdim=True)) * 2.0)
    check(model, [torch.randn(2, 4, 6, 6)], dtype, left=None)


@pytest.mark.parametrize("dtype", DTYPES)
def test_layout_ops_fuse_between_matmuls(dtype: str) -> None:
    # (b, s, h*d) -> (b, h, s, d), as attention heads are split.
    def fn(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        q = torch.matmul(x, w).view(2, 5, 4, 8).permute(0, 2, 1, 3)
        return torch.matmul(q, q.transpose(-1, -2)).flatten(2)

    check(Fn(fn), [torch.randn(2, 5, 32), torch.randn(32, 32)], dtype, left=None)


class ConvNd(nn.Module):
    def __init__(self, rank: int) -> None:
        super().__init__()
        self.conv = (nn.Conv1d if rank == 1 else nn.Conv3d)(4, 8, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.conv(x))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rank", [1, 3])
def test_conv1d_and_conv3d(dtype: str, rank: int) -> None:
    graph = check(ConvNd(rank), [torch.randn(2, 4, *([10] * rank))], dtype, groups=1, left=[])
    assert group_kinds(graph) == [["aten::_convolution", "aten::relu"]]
