"""int8: what the fuzzer's quantized mode found oneDNN 3.12 computing otherwise than
eager, each pinned: the pattern stays with ATen, or fuses with eager's result."""

from __future__ import annotations

import pytest
import torch
import torch.ao.quantization.fx._decomposed  # noqa: F401 (registers quantized_decomposed)
from fusion_check import eager, fuse, run
from int8_models import (
    DEQUANTIZE,
    QUANTIZE,
    S8_IN,
    S8_OUT,
    U8_IN,
    U8_OUT,
    VNNI,
    Act,
    QWeight,
    kinds,
)
from torch import nn
from torch.nn import functional as F

pytestmark = pytest.mark.usefixtures("int8_kernels")


class Requantize(nn.Module):
    """u8 dequantized, made contiguous, quantized to s8: nothing computed between."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        v = U8_IN.dequantize(U8_IN.quantize(x)).contiguous()
        return S8_OUT.quantize(v)


@pytest.mark.parametrize("layout", ["contiguous", "channels_last"])
@pytest.mark.parametrize("shape", [(1, 1, 2, 6), (4, 3, 5, 6)], ids=str)
def test_requantization_with_nothing_computed_between_is_exact(
        shape: tuple[int, ...], layout: str) -> None:
    # graph 1033: oneDNN v3.2 failed to execute the [Dequantize, Quantize] partition;
    # 3.12 runs it bit for bit as eager does.
    x = torch.randn(*shape)
    if layout == "channels_last":
        x = x.contiguous(memory_format=torch.channels_last)
    _, out, graph = fuse(Requantize(), [x])
    assert torch.equal(out, eager(Requantize(), [x]))
    assert any(DEQUANTIZE in k and QUANTIZE in k for k in kinds(graph))


class ResidualOfAnotherIntType(nn.Module):
    """An s8-quantized linear + a u8-dequantized residual (zero point 118)."""

    def __init__(self) -> None:
        super().__init__()
        fc = nn.Linear(1, 1)
        self.weight, self.bias = QWeight(fc.weight.detach()), fc.bias.detach()
        self.act = Act(0.01342, 118)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        d = self.act.qdq(x)
        y = F.linear(d, self.weight(), self.bias) + d
        return S8_OUT.quantize(y)


def test_dequantized_residual_of_another_integer_type_is_not_fused_as_a_sum() -> None:
    # graph 715: oneDNN read the u8 residual as s8, the result's type (v3.2; 3.12 is
    # 63 steps off).
    model, x = ResidualOfAnotherIntType(), torch.randn(3, 3, 1)
    _, out, graph = fuse(model, [x])
    ref = eager(model, [x])
    assert (out.int() - ref.int()).abs().max().item() <= 1
    assert not any("aten::add" in k and QUANTIZE in k for k in kinds(graph))


class DequantizedViewAndResult(nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        d = U8_IN.qdq(x)
        return torch.relu(d * 2.0), d.unsqueeze(-1), d


def test_split_dequantize_keeps_a_view_and_the_result_on_one_tensor() -> None:
    # graphs 936 and 1432: the returned value and its view got different copies.
    x = torch.randn(2, 4, 3, 9)
    _, (a, view, d), _ = fuse(DequantizedViewAndResult(), [x])
    ref = eager(DequantizedViewAndResult(), [x])
    assert torch.equal(a, ref[0]) and torch.equal(view, ref[1]) and torch.equal(d, ref[2])
    assert view.untyped_storage().data_ptr() == d.untyped_storage().data_ptr()


class QDepthwiseMultiplier(nn.Module):
    """A depthwise conv with a channel multiplier of 4 on s8 data."""

    def __init__(self) -> None:
        super().__init__()
        conv = nn.Conv2d(4, 16, 3, stride=(1, 2), groups=4)
        self.weight, self.bias = QWeight(conv.weight.detach()), conv.bias.detach()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.conv2d(S8_IN.qdq(x), self.weight(), self.bias, stride=(1, 2), groups=4)


def _assert_conv_left_with_aten(model: nn.Module, x: torch.Tensor) -> None:
    """Eager's result, with the convolution outside every group."""
    _, out, graph = fuse(model, [x])
    torch.testing.assert_close(out, eager(model, [x]), rtol=1e-4, atol=1e-4)
    assert not any("aten::_convolution" in k for k in kinds(graph))


def test_depthwise_conv_with_a_channel_multiplier_stays_with_aten() -> None:
    # Found by the fuzzer's quantized mode (seed 4, graphs 748 and 1361): oneDNN 3.12
    # computed it up to 21 off at an output width of 1.
    _assert_conv_left_with_aten(QDepthwiseMultiplier(), torch.randn(2, 4, 6, 3))


class QSingleChannelConv(nn.Module):
    """A conv of one s8 input channel, padded along the width only."""

    def __init__(self) -> None:
        super().__init__()
        conv = nn.Conv2d(1, 8, 3, padding=(0, 1))
        self.weight, self.bias = QWeight(conv.weight.detach()), conv.bias.detach()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.conv2d(S8_IN.qdq(x), self.weight(), self.bias, padding=(0, 1))


def test_int8_conv_of_one_s8_channel_stays_with_aten() -> None:
    # Found by the fuzzer's quantized mode (seed 7, graph 409): oneDNN 3.12 computed it
    # up to 3.4 off where one rounding flip allows 7e-5.
    _assert_conv_left_with_aten(QSingleChannelConv(), torch.randn(3, 1, 5, 9))


class QDilatedConv(nn.Module):
    """A conv whose dilated kernel meets a width-1 input: windows entirely in padding."""

    def __init__(self) -> None:
        super().__init__()
        conv = nn.Conv2d(3, 8, (3, 2), padding=(1, 1), dilation=(1, 2), bias=False)
        self.weight = QWeight(conv.weight.detach())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.conv2d(U8_IN.qdq(x), self.weight(), padding=(1, 1), dilation=(1, 2))


@pytest.mark.parametrize("width", [1, 6])
def test_int8_conv_window_in_the_padding_matches_eager(width: int) -> None:
    # Found by the fuzzer's quantized mode (seed 5, graph 44): oneDNN 3.12 gave 2.2
    # where eager's window of padding gives 0. Width 1 stays with ATen; width 6 fuses
    # pinned to its sizes, and a call at width 1 runs unfused.
    model, x = QDilatedConv(), torch.randn(2, 3, 6, width)
    module, out, graph = fuse(model, [x])
    torch.testing.assert_close(out, eager(model, [x]), rtol=1e-4, atol=1e-4)
    assert any("aten::_convolution" in k for k in kinds(graph)) == (VNNI and width > 1)
    narrow = torch.randn(2, 3, 6, 1)
    torch.testing.assert_close(run(module, [narrow]), eager(model, [narrow]),
                               rtol=1e-4, atol=1e-4)


class QLinearScaled(nn.Module):
    """An s8 linear between an s8 activation and a u8 result, both of scale `scale`."""

    kind = "aten::linear"

    def __init__(self, scale: float) -> None:
        super().__init__()
        fc = nn.Linear(5, 3)
        self.weight, self.bias = QWeight(fc.weight.detach()), fc.bias.detach()
        self.act, self.out = Act(scale, -127, torch.int8), Act(scale, 0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out.quantize(F.linear(self.act.qdq(x), self.weight(), self.bias))


class QConvScaled(QLinearScaled):
    """The same around a 3x3 convolution."""

    kind = "aten::_convolution"

    def __init__(self, scale: float) -> None:
        super().__init__(scale)
        conv = nn.Conv2d(3, 4, 3)
        self.weight, self.bias = QWeight(conv.weight.detach()), conv.bias.detach()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out.quantize(F.conv2d(self.act.qdq(x), self.weight(), self.bias))


@pytest.mark.parametrize(("model_type", "shape"),
                         [(QLinearScaled, (4, 5)), (QConvScaled, (1, 3, 6, 6))],
                         ids=["linear", "conv"])
@pytest.mark.parametrize(("scale", "fuses"), [(2e34, False), (0.05, True)])
def test_int8_product_whose_scaled_sum_could_overflow_stays_with_aten(
        model_type: type[QLinearScaled], shape: tuple[int, ...], scale: float,
        fuses: bool) -> None:
    # Found by the fuzzer's quantized mode (seed 2737, graph 1003; scales 1.3e35 and
    # 8.7e34): oneDNN 3.12 scales the integer sum by the source's scale first, which
    # overflows to inf: the linear quantized 255 where eager gives 128, the convolution
    # was 223 steps off.
    torch.manual_seed(0)
    model = model_type(scale)
    x = (torch.rand(*shape) * 254 - 127) * scale
    _, out, graph = fuse(model, [x])
    ref = eager(model, [x])
    assert (out.int() - ref.int()).abs().max().item() <= 1
    assert any(model.kind in k for k in kinds(graph)) == (fuses and VNNI)


class TransposedBatchProduct(nn.Module):
    """`v @ v.transpose(-1, -2)`, v the s8 operand's dims 3 and 0 swapped: v's rows lie
    innermost in memory, with a batch dim between its rows and its columns."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        v = S8_IN.dequantize(S8_IN.quantize(x.contiguous().transpose(3, 0)))
        return U8_OUT.quantize(F.relu6(torch.matmul(v, v.transpose(-1, -2)) / 4.0))


def test_product_of_a_transposed_operand_with_a_batch_dim_inside_stays_with_aten() -> None:
    # seed 2779, graph 77: oneDNN 3.12 gave 255 where eager gave 0 (473 of 648 values).
    model, x = TransposedBatchProduct(), torch.randn(2, 8, 9, 5)
    _, out, graph = fuse(model, [x])
    assert torch.equal(out, eager(model, [x]))
    assert not any("aten::matmul" in k for k in kinds(graph))
