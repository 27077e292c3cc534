"""Convolution and what fuses into it, in fp32 and bf16."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from fusion_check import (
    DTYPES,
    assert_matches,
    check,
    check_nonfinite_call,
    eager,
    fuse,
    group_kinds,
    run,
    skip_unless_bf16_fuses,
    unfused,
)
from torch import nn
from torch.nn import functional as F

import torch_graphfuse
from torch_graphfuse.testing import runner


def _bn(channels: int, kind: type[nn.modules.batchnorm._BatchNorm] = nn.BatchNorm2d
        ) -> nn.modules.batchnorm._BatchNorm:
    bn = kind(channels)
    with torch.no_grad():
        bn.running_mean.uniform_(-0.5, 0.5)
        bn.running_var.uniform_(0.5, 2.0)
        bn.weight.uniform_(0.5, 1.5)
        bn.bias.uniform_(-0.5, 0.5)
    return bn


class Conv(nn.Module):
    def __init__(self, then: Callable[[torch.Tensor], torch.Tensor] = torch.relu,
                 cin: int = 4, cout: int = 8, **conv: object) -> None:
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, conv.pop("kernel", 3), **conv)  # type: ignore[arg-type]
        self.then = then

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.then(self.conv(x))


CONV_SWEEP = [
    dict(kernel=1), dict(kernel=3), dict(kernel=5, padding=2), dict(kernel=3, stride=2),
    dict(kernel=3, padding=1, stride=2), dict(kernel=3, dilation=2),
    dict(kernel=3, dilation=2, padding=2), dict(kernel=3, groups=2), dict(kernel=3, groups=4),
    dict(kernel=3, bias=False), dict(kernel=(1, 3), padding=(0, 1)),
    dict(kernel=3, stride=(2, 1), padding=(1, 0)),
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("conv", CONV_SWEEP, ids=str)
def test_conv2d_parameter_sweep(dtype: str, conv: dict[str, object]) -> None:
    # groups=4 over 4 input channels into 8 is a depthwise conv with a channel
    # multiplier, which stays with ATen in bf16 (the convolution lowering: a oneDNN bug).
    if dtype == "bf16" and conv.get("groups") == 4:
        check(Conv(**conv), [torch.randn(2, 4, 15, 15)], dtype, groups=0,
              left=["aten::_convolution", "aten::relu"])
        return
    check(Conv(**conv), [torch.randn(2, 4, 15, 15)], dtype, groups=1, left=[])


def test_depthwise_conv() -> None:
    check(Conv(cin=8, cout=8, groups=8, padding=1), [torch.randn(1, 8, 12, 12)], groups=1,
          left=[])


ELTWISE: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "relu": torch.relu,
    "relu_": torch.relu_,
    "leaky_relu": lambda x: F.leaky_relu(x, 0.1),
    "leaky_relu_": lambda x: F.leaky_relu_(x, 0.1),
    "elu": F.elu,
    "elu_": lambda x: F.elu_(x, 0.5),
    "gelu": F.gelu,
    "tanh": torch.tanh,
    "tanh_": torch.tanh_,
    "hardswish": F.hardswish,
    "hardswish_": lambda x: F.hardswish(x, inplace=True),
    "silu": F.silu,
    "silu_": lambda x: F.silu(x, inplace=True),
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "abs": torch.abs,
    "abs_": torch.abs_,
    "square": torch.square,
    "sqrt_of_abs": lambda x: torch.sqrt(torch.abs(x)),
    "log_of_abs": lambda x: torch.log(torch.abs(x) + 1.0),
    "pow2": lambda x: torch.pow(x, 2),
    "round": torch.round,
    "mul_scalar_": lambda x: x.mul_(2.0),
    "add_scalar_": lambda x: x.add_(1.0),
}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", sorted(ELTWISE))
def test_conv_eltwise(dtype: str, name: str) -> None:
    model, x = Conv(ELTWISE[name]), torch.randn(1, 4, 12, 12)
    if name == "round" and dtype == "bf16":
        # Fused, the conv result is rounded before its bf16 conversion, eagerly
        # after: a value near .5 may land one integer apart.
        _, out, graph = fuse(model, [x], dtype)
        torch.testing.assert_close(out, eager(model, [x], dtype), rtol=0, atol=1.0)
        skip_unless_bf16_fuses(graph, dtype)
        assert unfused(graph, dtype) == []
    else:
        graph = check(model, [x], dtype, groups=1, left=[])
    assert "aten::_convolution" in group_kinds(graph)[0]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", ["mish", "softplus"])
def test_conv_softplus_family_keeps_it_unfused(dtype: str, name: str) -> None:
    # oneDNN's SoftPlus is 1e-6 off in absolute terms (0 or negative where ATen's is
    # tiny and positive): the conv fuses alone.
    fn = {"mish": F.mish, "softplus": F.softplus}[name]
    check(Conv(fn), [torch.randn(1, 4, 12, 12)], dtype, groups=1, left=[f"aten::{name}"])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "nhwc"])
def test_conv_silu(dtype: str, channels_last: bool) -> None:
    model = Conv(F.silu, padding=1)
    x = torch.randn(2, 4, 10, 10)
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
        x = x.to(memory_format=torch.channels_last)
    graph = check(model, [x], dtype, groups=1, left=[])
    assert group_kinds(graph) == [["aten::_convolution", "aten::silu"]]


# oneDNN's clamp family returns a bound for NaN, its exp +inf and its
# logistic 0 in some kernels: these map only where their input is proven
# finite (passes/finiteness), here a convolution of a checked graph input.
FINITE_ONLY_ELTWISE: dict[str, tuple[Callable[[torch.Tensor], torch.Tensor], str]] = {
    "relu6": (F.relu6, "aten::relu6"),
    "hardtanh": (F.hardtanh, "aten::hardtanh"),
    "hardtanh_bounds": (lambda x: F.hardtanh(x, -2.0, 2.0), "aten::hardtanh"),
    "hardtanh_": (lambda x: F.hardtanh_(x, -0.5, 0.5), "aten::hardtanh"),
    "hardsigmoid": (F.hardsigmoid, "aten::hardsigmoid"),
    "hardsigmoid_": (lambda x: F.hardsigmoid(x, inplace=True), "aten::hardsigmoid"),
    "exp": (torch.exp, "aten::exp"),
    "sigmoid": (torch.sigmoid, "aten::sigmoid"),
    "sigmoid_": (torch.sigmoid_, "aten::sigmoid"),
    "exp_": (torch.exp_, "aten::exp"),
    "clamp": (lambda x: torch.clamp(x, -0.5, 0.5), "aten::clamp"),
    "clamp_": (lambda x: torch.clamp_(x, -0.5, 0.5), "aten::clamp"),
    "clamp_min_only": (lambda x: torch.clamp(x, min=0.0), "aten::clamp"),
    "clamp_max_only": (lambda x: torch.clamp(x, max=0.5), "aten::clamp"),
    "clamp_int_bounds": (lambda x: torch.clamp(x, -1, 2), "aten::clamp"),
    "clamp_min": (lambda x: torch.clamp_min(x, 0.1), "aten::clamp_min"),
    "clamp_max": (lambda x: torch.clamp_max(x, 0.1), "aten::clamp_max"),
    "relu": (torch.relu, "aten::relu"),
}


def with_nan(x: torch.Tensor) -> torch.Tensor:
    """x with a NaN, which reaches the eltwise op through the convolution."""
    x[0, 0, 5, 5] = float("nan")
    return x


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", sorted(FINITE_ONLY_ELTWISE))
def test_conv_finite_only_eltwise_fuses_and_runs_unfused_on_nan(dtype: str, name: str) -> None:
    fn, _ = FINITE_ONLY_ELTWISE[name]
    x = torch.randn(1, 4, 12, 12)
    check(Conv(fn), [x], dtype, groups=1, left=[])
    check_nonfinite_call(Conv(fn), [x], [with_nan(x.clone())], dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_conv_clamp_with_an_infinite_bound_stays_with_aten(dtype: str) -> None:
    model = Conv(lambda x: torch.clamp(x, 0.0, float("inf")))
    graph = check(model, [torch.randn(1, 4, 12, 12)], dtype, groups=1, left=["aten::clamp"])
    assert group_kinds(graph) == [["aten::_convolution"]]


class ConvBn(nn.Module):
    def __init__(self, relu: bool) -> None:
        super().__init__()
        self.conv = nn.Conv2d(4, 8, 3, padding=1, bias=False)
        self.bn = _bn(8)
        self.relu = relu

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.bn(self.conv(x))
        return torch.relu(y) if self.relu else y


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("relu", [False, True], ids=["conv_bn", "conv_bn_relu"])
def test_conv_bn(dtype: str, relu: bool) -> None:
    # freeze folds the batch norm into the convolution's weights and bias.
    graph = check(ConvBn(relu), [torch.randn(2, 4, 9, 9)], dtype, groups=1, left=[])
    assert "aten::batch_norm" not in str(graph)


class BnRelu(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.bn = _bn(4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.bn(x))


@pytest.mark.parametrize("dtype", DTYPES)
def test_bn_relu_fuses_on_a_checked_input(dtype: str) -> None:
    # A batch norm with no convolution before it stays a batch norm. oneDNN's
    # batch norm pattern takes only its own ReLU post-op, which turns NaN into
    # 0: it is taken because the input is checked finite per call.
    x = torch.randn(2, 4, 6, 6)
    check(BnRelu(), [x], dtype, groups=1, left=[])
    check_nonfinite_call(BnRelu(), [x], [with_nan(x.clone())], dtype)


class ConvGeluBn(nn.Module):
    """ConvMixer's block: a BatchNorm after the activation, which no convolution takes
    by freezing's fold, and a residual add."""

    def __init__(self, kernel: int = 3) -> None:
        super().__init__()
        self.conv, self.bn = nn.Conv2d(8, 8, kernel, padding=kernel // 2, groups=8), _bn(8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.bn(F.gelu(self.conv(x))) + x


@pytest.mark.parametrize("dtype", DTYPES)
def test_batch_norm_after_a_convolutions_activation_joins_its_post_ops(dtype: str) -> None:
    # In float32 the BatchNorm is ATen's own arithmetic, x * alpha + beta per channel:
    # oneDNN has no pattern for a BatchNormInference after an activation, and it stood
    # alone. bf16 keeps BatchNormInference (ATen computes alpha and beta in float32).
    graph = check(ConvGeluBn(), [torch.randn(1, 8, 12, 12)], dtype, left=None)
    if dtype == "fp32":
        assert group_kinds(graph) == [["aten::_convolution", "aten::add", "aten::batch_norm",
                                       "aten::gelu"]], graph


@pytest.mark.parametrize(("profiled", "called"), [((1, 8, 12, 12), (4, 8, 1, 1)),
                                                  ((4, 8, 1, 1), (4, 8, 1, 1))])
def test_batch_norm_as_scale_and_shift_meets_the_channel_broadcast_bug_unfused(
        profiled: tuple[int, ...], called: tuple[int, ...]) -> None:
    # A (1, C, 1, 1) operand broadcast over a batch of one-pixel results is oneDNN's
    # broadcast bug: pinned to the profiled sizes, refused where they are the case.
    model = ConvGeluBn(kernel=1)
    module, _, graph = fuse(model, [torch.randn(*profiled)])
    if profiled == called:
        assert "aten::batch_norm" in runner.unfused_kinds(graph)
    x = torch.randn(*called)
    assert_matches(run(module, [x]), eager(model, [x]), "fp32")


class LinearReluBn1d(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear, self.bn = nn.Linear(16, 8), _bn(8, nn.BatchNorm1d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.bn(torch.relu(self.linear(x)))


def test_batch_norm_of_rows_after_a_linear_layer_fuses_at_any_batch() -> None:
    # A (C,) operand broadcast over (N, C) rows is not the bug's case: nothing is pinned.
    model = LinearReluBn1d()
    module, _, graph = fuse(model, [torch.randn(4, 16)])
    assert group_kinds(graph) == [["aten::batch_norm", "aten::linear", "aten::relu"]]
    torch_graphfuse.reset_kernel_stats()
    x = torch.randn(7, 16)
    assert_matches(run(module, [x]), eager(model, [x]), "fp32")
    assert torch_graphfuse.kernel_stats()["fallbacks"] == 0


class ConvBnSumRelu(nn.Module):
    """The ResNet basic block: conv-bn-relu, conv-bn, + shortcut, relu."""

    def __init__(self, downsample: bool) -> None:
        super().__init__()
        stride = 2 if downsample else 1
        self.conv1, self.bn1 = nn.Conv2d(8, 16, 3, stride, 1, bias=False), _bn(16)
        self.conv2, self.bn2 = nn.Conv2d(16, 16, 3, 1, 1, bias=False), _bn(16)
        self.short = nn.Sequential(nn.Conv2d(8, 16, 1, stride, bias=False), _bn(16))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(self.bn2(self.conv2(y)) + self.short(x))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("downsample", [False, True])
def test_conv_bn_sum_relu(dtype: str, downsample: bool) -> None:
    graph = check(ConvBnSumRelu(downsample), [torch.randn(1, 8, 16, 16)], dtype, left=[])
    assert len(runner.fusion_groups(graph)) <= 3


class ConvInList(nn.Module):
    """A conv output that is also returned as a list element (a wildcard user)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(4, 4, 3, padding=1)

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        y = self.conv(x)
        return [y, torch.relu(y)]


@pytest.mark.filterwarnings("ignore:Encountering a list at the output of the tracer")
@pytest.mark.parametrize("dtype", DTYPES)
def test_conv_output_also_returned_in_a_list(dtype: str) -> None:
    model = ConvInList()
    inputs = [torch.randn(1, 4, 8, 8)]
    _, out, graph = fuse(model, inputs, dtype)
    ref = eager(model, inputs, dtype)
    for a, b in zip(out, ref, strict=True):  # type: ignore[call-overload]
        assert_matches(a, b, dtype)
    skip_unless_bf16_fuses(graph, dtype)
    assert "aten::_convolution" not in runner.unfused_kinds(graph)


class ConvThenUnfused(nn.Module):
    """A partition output consumed by an op left to ATen (erf: oneDNN has no
    such op), which keeps its input's memory format."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(4, 8, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.conv(x))
        return torch.erf(y)


@pytest.mark.parametrize("dtype", DTYPES)
def test_channels_last_strides_handed_to_unfused_op(dtype: str) -> None:
    model = ConvThenUnfused().to(memory_format=torch.channels_last)
    x = torch.randn(2, 4, 8, 8).to(memory_format=torch.channels_last)
    _, out, graph = fuse(model, [x], dtype)
    ref = eager(model, [x], dtype)
    assert_matches(out, ref, dtype)
    # erf keeps its input's memory format: the group handed back NHWC strides.
    assert ref.is_contiguous(memory_format=torch.channels_last)
    assert out.is_contiguous(memory_format=torch.channels_last)
    skip_unless_bf16_fuses(graph, dtype)
    assert unfused(graph, dtype) == ["aten::erf"]


@pytest.mark.parametrize("dtype", DTYPES)
def test_single_channel_conv_to_width_one_stays_with_aten(dtype: str) -> None:
    # oneDNN 3.12 computes this convolution wrongly (off by up to 2.5): one
    # input channel, a (2, 3) kernel, an output width of 1.
    model = Conv(cin=1, cout=4, kernel=(2, 3), stride=(1, 2), padding=(1, 0))
    check(model, [torch.randn(2, 1, 5, 3)], dtype, groups=0, left=None)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", ["width_one", "width_two"])
def test_single_channel_conv3d_stays_with_aten(dtype: str, case: str) -> None:
    # Found by the fuzzer (bf16), at output widths 1 and 2: oneDNN 3.12 gets many 3-d
    # single-channel convolutions wrong.
    if case == "width_one":
        model = nn.Conv3d(1, 2, (5, 1, 2), (2, 2, 1), (4, 0, 0), (2, 2, 1), bias=True)
        x = torch.randn(3, 1, 1, 5, 2)
    else:
        model = nn.Conv3d(1, 4, (3, 3, 3), (2, 1, 1), (1, 0, 1), bias=True)
        x = torch.randn(3, 1, 1, 3, 2)
    check(model, [x], dtype, groups=0, left=None)


@pytest.mark.parametrize("dtype", DTYPES)
def test_single_channel_conv_pinned_where_a_width_could_reach_one(dtype: str) -> None:
    # Profiled at width 9 (output width 4) it fuses, pinned to those sizes: at
    # width 3 the group runs unfused and the result is eager's.
    model = Conv(cin=1, cout=4, kernel=(2, 3), stride=(1, 2), padding=(1, 0))
    module, _, graph = fuse(model, [torch.randn(2, 1, 5, 9)], dtype)
    narrow = [torch.randn(2, 1, 5, 3)]
    assert_matches(run(module, narrow, dtype), eager(model, narrow, dtype), dtype)
    skip_unless_bf16_fuses(graph, dtype)
    assert len(runner.fusion_groups(graph)) == 1


class PaddedStrideTwo(nn.Module):
    """Hugging Face EfficientNet's downsampling: a pointwise conv and SiLU, a ZeroPad2d of one
    row and column at the end, a stride-2 depthwise conv; and a 1-d conv after an uneven
    `F.pad`."""

    def __init__(self, value: float = 0.0, both: bool = False) -> None:
        super().__init__()
        self.pointwise = nn.Conv2d(8, 16, 1)
        self.depthwise = nn.Conv2d(16, 16, 3, 2, groups=16)
        self.line = nn.Conv1d(16, 8, 3)
        self.value, self.both = value, both

    def forward(self, x: torch.Tensor) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        padded = F.pad(F.silu(self.pointwise(x)), (0, 1, 0, 1), value=self.value)
        y = self.line(F.pad(self.depthwise(padded).flatten(2), (2, 1)))
        return (y, padded) if self.both else y


@pytest.mark.parametrize("dtype", DTYPES)
def test_zero_padding_is_taken_into_the_convolution_after_it(dtype: str) -> None:
    model = PaddedStrideTwo()
    check(model, [torch.randn(1, 8, 14, 14)], dtype, groups=2, left=[])
    assert all("aten::pad" in kinds for kinds in torch_graphfuse.last_report().groups)
    module, _, _ = fuse(model, [torch.randn(1, 8, 14, 14)], dtype)
    other = torch.randn(2, 8, 11, 9)  # odd sizes: the end padding makes the last window
    assert_matches(run(module, [other], dtype), eager(model, [other], dtype), dtype)


@pytest.mark.parametrize(("value", "both"), [(1.0, False), (0.0, True)])
def test_padding_by_another_value_or_read_elsewhere_stays_with_aten(value: float,
                                                                    both: bool) -> None:
    graph = check(PaddedStrideTwo(value, both), [torch.randn(1, 8, 14, 14)], left=None)
    assert "aten::pad" in runner.unfused_kinds(graph)


def test_padding_taken_into_a_convolution_keeps_nan_where_eager_has_it() -> None:
    model, x = PaddedStrideTwo(), torch.randn(1, 8, 14, 14)
    module, _, _ = fuse(model, [x])
    bad = x.clone()
    bad[0, 3, 13, 13] = float("nan")  # next to the padded row and column
    assert_matches(run(module, [bad]), eager(model, [bad]), "fp32")


class PaddedPastTheKernel(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv1d(1, 2, 2, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(F.pad(x, (1, 2)))


def test_padding_past_the_kernels_reach_stays_with_aten() -> None:
    # Found by the fuzzer (seed 2802): taken into the convolution, a width of 1 padded by
    # (1, 2) before a kernel of 2 crashed oneDNN 3.12. Only paddings within the kernel's
    # reach, dilation * (kernel - 1), are taken in.
    graph = check(PaddedPastTheKernel(), [torch.randn(1, 1, 1)], left=None)
    assert "aten::pad" in runner.unfused_kinds(graph)
