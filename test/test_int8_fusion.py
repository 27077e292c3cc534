"""int8: models in PT2E's quantized form (quantize/dequantize ops on plain u8/s8
tensors, per-channel s8 weights) fuse into oneDNN Graph int8 partitions and
match the reference quantized model run by eager PyTorch within one
quantization step. The modules below write that form by hand, so each
scheme (u8/s8, zero points, shared dequantize, what is not supported) is
pinned on its own; test_quantize_recipes.py covers the torchao flow itself."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pytest
import torch
import torch.ao.quantization.fx._decomposed  # noqa: F401 (registers quantized_decomposed)
from fusion_check import eager, fuse, run
from torch import nn
from torch.nn import functional as F

import torch_graphfuse
from torch_graphfuse.passes.quantized_weights import int8_form
from torch_graphfuse.testing import runner

qd = torch.ops.quantized_decomposed

# Without VNNI, oneDNN's u8 x s8 products saturate in int16: int8 convolutions and
# linears then stay with ATen (exact).
VNNI = torch_graphfuse.onednn_info()["vnni"]


def fused_where_vnni(groups: int) -> int:
    """How many int8 compute groups form on this CPU, where `groups` form with VNNI."""
    return groups if VNNI else 0

DEQUANTIZE = "quantized_decomposed::dequantize_per_tensor"
QUANTIZE = "quantized_decomposed::quantize_per_tensor"
WEIGHT = "quantized_decomposed::dequantize_per_channel"


@dataclass(frozen=True)
class Act:
    """Per-tensor quantization of an activation."""

    scale: float
    zero_point: int
    dtype: torch.dtype = torch.uint8

    @property
    def bounds(self) -> tuple[int, int]:
        return (0, 255) if self.dtype == torch.uint8 else (-128, 127)

    def quantize(self, x: torch.Tensor) -> torch.Tensor:
        return qd.quantize_per_tensor(x, self.scale, self.zero_point, *self.bounds, self.dtype)

    def dequantize(self, q: torch.Tensor) -> torch.Tensor:
        return qd.dequantize_per_tensor(q, self.scale, self.zero_point, *self.bounds, self.dtype)

    def qdq(self, x: torch.Tensor) -> torch.Tensor:
        return self.dequantize(self.quantize(x))


U8_IN = Act(0.03, 128)
U8_OUT = Act(0.02, 0)
S8_IN = Act(0.03, 0, torch.int8)
S8_OUT = Act(0.025, -3, torch.int8)


class QWeight(nn.Module):
    """A per-output-channel symmetric s8 weight, dequantized in forward as
    PT2E's converted model does (freezing folds it; the plugin restores it)."""

    def __init__(self, weight: torch.Tensor) -> None:
        super().__init__()
        flat = weight.reshape(weight.shape[0], -1)
        scales = (flat.abs().amax(1) / 127.5).clamp(min=2.0 ** -12)
        zero_points = torch.zeros(weight.shape[0], dtype=torch.int64)
        self.register_buffer("q", qd.quantize_per_channel(
            weight, scales, zero_points, 0, -128, 127, torch.int8))
        self.register_buffer("scales", scales)
        self.register_buffer("zero_points", zero_points)

    def forward(self) -> torch.Tensor:
        return qd.dequantize_per_channel(self.q, self.scales, self.zero_points, 0, -128, 127,
                                         torch.int8)


class QConv(nn.Module):
    """dequant -> conv (+bias) [-> relu] [+ residual] -> quant [-> dequant]."""

    def __init__(self, act_in: Act = U8_IN, act_out: Act | None = U8_OUT, relu: bool = True,
                 residual: str | None = None, channels: int = 8) -> None:
        super().__init__()
        conv = nn.Conv2d(channels, channels, 3, padding=1)
        self.weight, self.bias = QWeight(conv.weight.detach()), conv.bias.detach()
        self.act_in, self.act_out, self.relu, self.residual = act_in, act_out, relu, residual

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q = self.act_in.quantize(x)
        y = F.conv2d(self.act_in.dequantize(q), self.weight(), self.bias, padding=1)
        if self.residual == "dequantized":  # the same quantized input, dequantized again
            y = y + self.act_in.dequantize(q)
        elif self.residual == "float":
            y = y + x
        if self.relu:
            y = torch.relu(y)
        return y if self.act_out is None else self.act_out.qdq(y)


class QLinear(nn.Module):
    def __init__(self, act_in: Act = U8_IN, act_out: Act | None = U8_OUT,
                 then: str = "relu") -> None:
        super().__init__()
        fc = nn.Linear(16, 24)
        self.weight, self.bias = QWeight(fc.weight.detach()), fc.bias.detach()
        self.act_in, self.act_out, self.then = act_in, act_out, then

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.linear(self.act_in.qdq(x), self.weight(), self.bias)
        y = {"relu": torch.relu, "gelu": F.gelu, "none": lambda t: t}[self.then](y)
        return y if self.act_out is None else self.act_out.qdq(y)


class QMatmul(nn.Module):
    """Two dequantized activations multiplied (attention's scores)."""

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.matmul(U8_IN.qdq(a), S8_IN.qdq(b)) / 4.0


class SharedDequantize(nn.Module):
    """One dequantized value read by a conv and by the add after it."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = QConv(act_out=None, relu=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        d = U8_IN.qdq(x)
        y = F.conv2d(d, self.conv.weight(), self.conv.bias, padding=1)
        return U8_OUT.qdq(torch.relu(y + d))


class QBlock(nn.Module):
    """A ResNet basic block in PT2E form: conv-relu-conv, + identity, relu."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = QConv(U8_IN, Act(0.02, 0), relu=True)
        self.conv2 = QConv(Act(0.02, 0), None, relu=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = U8_IN.qdq(x)
        y = self.conv2(self.conv1(x)) + identity
        return U8_OUT.qdq(torch.relu(y))


def _step(act: Act | None) -> float:
    return 0.0 if act is None else act.scale


def check_int8(model: nn.Module, inputs: Sequence[torch.Tensor], step: float,
               int8_groups: int = 1) -> torch._C.Graph:
    """Fuse; the result matches eager's reference quantized model within one
    quantization step (`step`: the output's scale), and `int8_groups` groups
    compute a conv or linear on int8 data (a dequantized input and weight) where
    the CPU has VNNI, none elsewhere."""
    _, out, graph = fuse(model, inputs)
    ref = eager(model, inputs)
    assert out.dtype == ref.dtype and out.shape == ref.shape
    assert (out - ref).abs().max().item() <= step * 1.001 + 1e-6, (out - ref).abs().max()
    groups = [k for k in kinds(graph) if DEQUANTIZE in k and WEIGHT in k]
    assert len(groups) == fused_where_vnni(int8_groups), graph
    return graph


def kinds(graph: torch._C.Graph) -> list[list[str]]:
    return sorted(runner.group_kinds(g) for g in runner.fusion_groups(graph))


def images(channels: int = 8) -> list[torch.Tensor]:
    return [torch.randn(2, channels, 10, 10)]


@pytest.mark.parametrize("act_in,act_out", [(U8_IN, U8_OUT), (S8_IN, S8_OUT), (U8_IN, S8_OUT)],
                         ids=["u8", "s8", "u8-to-s8"])
def test_conv_relu_int8(act_in: Act, act_out: Act) -> None:
    graph = check_int8(QConv(act_in, act_out), images(), act_out.scale)
    whole = [DEQUANTIZE, WEIGHT, "aten::_convolution", "aten::relu", QUANTIZE]
    assert (whole in [sorted(k, key=whole.index) for k in kinds(graph)]) == VNNI


def test_int8_products_that_would_saturate_without_vnni_match_eager() -> None:
    # Activations at 255 against weights at +-127: each u8 x s8 pair sums to up to
    # 64,770, which vpmaddubsw (oneDNN's int8 product without VNNI) saturates at
    # 32,767. Emulated AVX2 or AVX-512 without VNNI once put results 17 steps off.
    model = QConv(relu=False)
    with torch.no_grad():
        model.weight.q.copy_(torch.where(model.weight.q >= 0, 127, -127).to(torch.int8))
    x = torch.full((2, 8, 12, 12), 4.0)  # quantizes to 255
    check_int8(model, [x], U8_OUT.scale)
    if not VNNI:
        assert any("without VNNI" in why for _, why in torch_graphfuse.last_report().rejected)


def test_conv_with_a_float_output() -> None:
    check_int8(QConv(act_out=None), images(), 0.0 + 1e-4)


@pytest.mark.parametrize("residual", ["dequantized", "float"])
def test_conv_residual_add(residual: str) -> None:
    # A residual dequantized from the conv's own quantized input stays outside: oneDNN
    # 3.12 computes that partition wrongly (see the linear case below).
    own = residual == "dequantized"
    graph = check_int8(QConv(residual=residual), images(), U8_OUT.scale,
                       int8_groups=0 if own else 1)
    fused_add = any("aten::add" in k and "aten::_convolution" in k for k in kinds(graph))
    assert fused_add == (VNNI and not own)


@pytest.mark.parametrize("then", ["relu", "gelu", "none"])
def test_linear_int8(then: str) -> None:
    check_int8(QLinear(then=then), [torch.randn(3, 5, 16)], U8_OUT.scale)


class QLinearOwnResidual(nn.Module):
    """A linear plus its own dequantized input, quantized."""

    def __init__(self, act: Act, act_out: Act) -> None:
        super().__init__()
        fc = nn.Linear(16, 16)
        self.weight, self.bias = QWeight(fc.weight.detach()), fc.bias.detach()
        self.act, self.act_out = act, act_out

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        d = self.act.qdq(x)
        return self.act_out.qdq(F.linear(d, self.weight(), self.bias) + d)


@pytest.mark.parametrize("act,act_out", [(U8_IN, U8_OUT), (S8_IN, S8_OUT)], ids=["u8", "s8"])
@pytest.mark.parametrize("shape", [(8, 16), (1, 16), (4, 7, 16)], ids=str)
def test_linear_with_a_residual_of_its_own_input_matches_eager(act: Act, act_out: Act,
                                                               shape: tuple[int, ...]) -> None:
    # oneDNN 3.12 fused it up to 205 quantization steps off (found re-examining the
    # residual rules on 3.12); the int8 linear stays with ATen there.
    check_int8(QLinearOwnResidual(act, act_out), [torch.randn(*shape)], act_out.scale,
               int8_groups=0)


def test_linear_s8_activations() -> None:
    check_int8(QLinear(S8_IN, S8_OUT), [torch.randn(4, 16)], S8_OUT.scale)


def test_matmul_of_two_dequantized_activations() -> None:
    a, b = torch.randn(2, 4, 8, 16), torch.randn(2, 4, 16, 8)
    _, out, graph = fuse(QMatmul(), [a, b])
    torch.testing.assert_close(out, eager(QMatmul(), [a, b]), rtol=1e-5, atol=1e-5)


def test_shared_dequantize_is_split_per_reader() -> None:
    # The conv and the add each get their own dequantize (and would take it into their
    # group); a residual of the conv's own input stays unfused on oneDNN 3.12.
    check_int8(SharedDequantize(), images(), U8_OUT.scale, int8_groups=0)
    offered = [region for region, _ in torch_graphfuse.last_report().rejected]
    assert any(r.startswith("dequantize_per_tensor, dequantize_per_tensor, ") for r in offered)


def test_resnet_block_int8() -> None:
    torch_graphfuse.reset_kernel_stats()
    check_int8(QBlock(), images(), U8_OUT.scale, int8_groups=2)
    assert torch_graphfuse.kernel_stats()["fallbacks"] == 0


def test_weight_is_restored_bit_exactly() -> None:
    weight = torch.randn(6, 4, 3, 3) * torch.logspace(-6, 0, 6)[:, None, None, None]
    folded = QWeight(weight)()
    q, scales = int8_form(folded)
    back = qd.dequantize_per_channel(q, scales, torch.zeros(6, dtype=torch.int64), 0, -128,
                                     127, torch.int8)
    assert torch.equal(back, folded)


def test_weight_without_an_int8_form_stays_float() -> None:
    assert int8_form(torch.randn(6, 4, 3, 3)) is None


def test_nan_input_gives_eager_result() -> None:
    model, x = QConv(), images()[0]
    module, _, _ = fuse(model, [x])
    y = x.clone()
    y[0, 0, :2, :2] = float("nan")
    y[1, 3, 4, 4] = float("inf")
    assert torch.equal(run(module, [y]), eager(model, [y]))


# -- schemes left with ATen, still right ------------------------------------


class NarrowRange(nn.Module):
    """u8 quantized to [0, 127] (reduce_range): oneDNN saturates to [0, 255]."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q = qd.quantize_per_tensor(x, 0.03, 64, 0, 127, torch.uint8)
        return torch.relu(qd.dequantize_per_tensor(q, 0.03, 64, 0, 127, torch.uint8) * 2.0)


class PerChannelActivation(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scales, zps = torch.full((8,), 0.03), torch.full((8,), 100, dtype=torch.int64)
        q = qd.quantize_per_channel(x, scales, zps, 1, 0, 255, torch.uint8)
        d = qd.dequantize_per_channel(q, scales, zps, 1, 0, 255, torch.uint8)
        return torch.relu(d * 2.0)


class DynamicQuantization(nn.Module):
    """Scale and zero point computed from the input at run time."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scale, zp = qd.choose_qparams.tensor(x, 0, 255, 1e-5, torch.uint8)
        q = qd.quantize_per_tensor.tensor(x, scale, zp, 0, 255, torch.uint8)
        return torch.relu(qd.dequantize_per_tensor.tensor(q, scale, zp, 0, 255, torch.uint8) * 2)


class Float16Quantization(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x.to(torch.float16).to(torch.float32) * 2.0)


@pytest.mark.parametrize("model", [NarrowRange(), PerChannelActivation(), DynamicQuantization(),
                                   Float16Quantization()], ids=lambda m: type(m).__name__)
def test_unsupported_scheme_stays_with_aten_and_matches(model: nn.Module) -> None:
    x = torch.randn(2, 8, 5, 5)
    _, out, graph = fuse(model, [x])
    assert torch.equal(out, eager(model, [x]))
    assert not any(k.startswith("quantized_decomposed::") for g in kinds(graph) for k in g)


# -- the flows users have: torchao's PT2E, torch.ao's FX reference models -----


class ConvBlock(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(8, 16, 3, padding=1)
        self.conv2 = nn.Conv2d(16, 16, 3, padding=1)
        self.fc = nn.Linear(16, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.conv1(x))
        y = torch.relu(self.conv2(y) + y)
        return self.fc(y.mean((2, 3)))


def _flow(recipe: str, model: nn.Module, x: torch.Tensor) -> tuple[nn.Module, torch.Tensor,
                                                                    torch._C.Graph]:
    from torch_graphfuse.testing import quantize

    calibration = [[torch.randn_like(x)] for _ in range(4)]
    reference = getattr(quantize, recipe)(model.eval(), [x], calibration)
    module = quantize.freeze_quantized(reference, [x])
    with torch.no_grad(), torch_graphfuse.fuser():
        for _ in range(runner.PROFILING_RUNS):
            module(x)
        out = module(x)
        graph = torch.jit.last_executed_optimized_graph()
    return reference, out, graph


def test_fx_reference_model_fuses_int8() -> None:
    x = torch.randn(2, 8, 10, 10)
    reference, out, graph = _flow("fx_reference", ConvBlock(), x)
    with torch.no_grad():
        ref = reference(x)
    # The output is the dequantized result of the last quantize (the linear's): its grid.
    step = float(reference.fc_scale_0)
    assert (out - ref).abs().max().item() <= step * 1.001
    int8 = [k for k in kinds(graph) if "aten::_convolution" in k and WEIGHT in k]
    assert len(int8) == fused_where_vnni(2), kinds(graph)
    assert "aten::quantize_per_tensor" not in runner.unfused_kinds(graph)


def test_pt2e_model_fuses_int8() -> None:
    pytest.importorskip("torchao")
    x = torch.randn(2, 8, 10, 10)
    reference, out, graph = _flow("pt2e", ConvBlock(), x)
    with torch.no_grad():
        ref = reference(x)
    assert torch.allclose(out, ref, rtol=0, atol=1e-4), (out - ref).abs().max()
    int8 = [k for k in kinds(graph) if WEIGHT in k]
    assert len(int8) == fused_where_vnni(3), kinds(graph)


class ReadsQuantizedValues(nn.Module):
    """A quantized tensor read by something other than dequantize keeps its form."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q = torch.quantize_per_tensor(x, 0.05, 10, torch.quint8)
        return torch.relu(q.dequantize() * 2.0) + q.int_repr().float()


def test_quantized_value_read_otherwise_stays_with_aten() -> None:
    x = torch.randn(2, 8, 5, 5)
    _, out, graph = fuse(ReadsQuantizedValues(), [x])
    assert torch.equal(out, eager(ReadsQuantizedValues(), [x]))
    assert "aten::quantize_per_tensor" in runner.unfused_kinds(graph)


def test_bert_layer_pt2e_int8() -> None:
    """A small BERT layer through PT2E: its linears run as int8 groups (the
    quantizer leaves attention's matmuls and softmax in float), and the result
    stays within the distance quantization itself puts between the reference
    and the float model."""
    pytest.importorskip("torchao")
    from torch_graphfuse.testing import quantize
    from torch_graphfuse.testing.transformer import bert_inputs, bert_layer

    model = bert_layer(hidden=64, heads=4, intermediate=128).eval()
    inputs = bert_inputs(2, 16, hidden=64)
    reference = quantize.pt2e(model, inputs, [inputs])
    module = quantize.freeze_quantized(reference, inputs)
    with torch.no_grad():
        ref, float_out = reference(*inputs), model(*inputs)
        with torch_graphfuse.fuser():
            for _ in range(runner.PROFILING_RUNS):
                module(*inputs)
            out = module(*inputs)
            graph = torch.jit.last_executed_optimized_graph()
    quantization_error = (ref - float_out).abs().max().item()
    assert (out - ref).abs().max().item() <= quantization_error
    linears = [k for k in kinds(graph) if "aten::linear" in k and WEIGHT in k and DEQUANTIZE in k]
    assert len(linears) == fused_where_vnni(6), kinds(graph)


# -- regressions found by the fuzzer's quantized mode (seed 1) ------------------


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


def test_depthwise_conv_with_a_channel_multiplier_stays_with_aten() -> None:
    # Found by the fuzzer's quantized mode (seed 4, graphs 748 and 1361): oneDNN 3.12
    # computed it up to 21 off at an output width of 1.
    model, x = QDepthwiseMultiplier(), torch.randn(2, 4, 6, 3)
    _, out, graph = fuse(model, [x])
    torch.testing.assert_close(out, eager(model, [x]), rtol=1e-4, atol=1e-4)
    assert not any("aten::_convolution" in k for k in kinds(graph))


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
    model, x = QSingleChannelConv(), torch.randn(3, 1, 5, 9)
    _, out, graph = fuse(model, [x])
    torch.testing.assert_close(out, eager(model, [x]), rtol=1e-4, atol=1e-4)
    assert not any("aten::_convolution" in k for k in kinds(graph))


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
