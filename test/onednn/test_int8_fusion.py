"""int8: models in PT2E's quantized form (quantize/dequantize ops on plain u8/s8
tensors, per-channel s8 weights) fuse into oneDNN Graph int8 partitions and
match the reference quantized model run by eager PyTorch within one
quantization step. The modules (int8_models.py) write that form by hand, so each
scheme (u8/s8, zero points, shared dequantize, what is not supported) is
pinned on its own; test_quantize_recipes.py covers the torchao flow itself."""

from __future__ import annotations

import collections

import pytest
import torch
import torch.ao.quantization.fx._decomposed  # noqa: F401 (registers quantized_decomposed)
from fusion_check import eager, fuse, run
from int8_models import (
    DEQUANTIZE,
    QUANTIZE,
    S8_IN,
    S8_OUT,
    U7_IN,
    U8_IN,
    U8_OUT,
    VNNI,
    WEIGHT,
    Act,
    QBlock,
    QConv,
    QLinear,
    QMatmul,
    QWeight,
    SharedDequantize,
    check_int8,
    images,
    kinds,
    qd,
)
from torch import nn
from torch.nn import functional as F

import torch_graphfuse
from torch_graphfuse.passes.quantized_weights import int8_form

pytestmark = pytest.mark.usefixtures("int8_kernels")


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


@pytest.mark.parametrize("quant_max", [127, 128, 129])
def test_products_of_u8_quantized_to_at_most_128_are_fused_without_vnni(quant_max: int) -> None:
    # vpmaddubsw sums pairs of u8 x s8 products in int16: u8 values up to 128 against s8
    # weights reach at most 2 x 128 x -128 = -32768, which int16 holds; at 129 the sum
    # 2 x 129 x 127 = 32766 still fits, but 2 x 129 x -128 does not. Activations at the
    # range's top and weights at +-127 / -128 reach those sums.
    act = Act(0.03, 0, quant_max=quant_max)
    model = QConv(act_in=act, relu=False)
    with torch.no_grad():
        model.weight.q.copy_(torch.where(model.weight.q >= 0, 127, -128).to(torch.int8))
    x = torch.full((2, 8, 12, 12), 100.0)  # quantizes to quant_max
    fits = quant_max <= 128
    check_int8(model, [x], U8_OUT.scale, without_vnni=1 if fits else 0)
    if not VNNI:
        saturates = any("without VNNI" in why for _, why in torch_graphfuse.last_report().rejected)
        assert saturates == (not fits)


def test_7_bit_resnet_block_fuses_and_matches_eager() -> None:
    block = QBlock()
    block.conv1.act_in = U7_IN
    block.conv1.act_out = Act(0.02, 0, quant_max=127)
    block.conv2.act_in = Act(0.02, 0, quant_max=127)
    check_int8(block, images(), U8_OUT.scale, int8_groups=2, without_vnni=2)


def _calls_per_run(module: torch.jit.ScriptModule, inputs: list[torch.Tensor]
                   ) -> collections.Counter:
    with torch.no_grad(), torch.profiler.profile() as profile:
        module(*inputs)
    return collections.Counter(e.name for e in profile.events())


@pytest.mark.parametrize("model", [QConv(residual="dequantized"), QBlock()],
                         ids=["refused-everywhere", "refused-without-vnni"])
def test_a_region_left_with_aten_runs_no_more_ops_than_frozen_torchscript(
        model: nn.Module) -> None:
    # Freezing folds the weights' dequantization, which the plugin puts back for oneDNN's
    # int8 patterns, and the plugin gives each reader of a dequantized activation its own
    # dequantize node: a region left with ATen must get both undone (a PT2E ResNet-50
    # dequantized its weights on every call, 1.95x frozen TorchScript's time).
    inputs = images()
    plain, want, _ = fuse(model, inputs, enabled=False)
    fused, out, graph = fuse(model, inputs)
    assert torch.equal(out, run(fused, inputs))
    ours, theirs = _calls_per_run(fused, inputs), _calls_per_run(plain, inputs)
    if not any(WEIGHT in k for k in kinds(graph)):  # no int8 product fused
        assert torch.equal(out, want)
        assert ours[WEIGHT] == theirs[WEIGHT] == 0
    assert ours[DEQUANTIZE] <= theirs[DEQUANTIZE]
    for op in ("aten::sub", "aten::mul", "aten::copy_"):
        assert ours[op] <= theirs[op], (op, ours, theirs)


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


@pytest.mark.parametrize("zero_point", [0, 3, 64])
def test_a_narrow_quantize_after_a_convolution_joins_its_group(zero_point: int) -> None:
    # oneDNN's quantize saturates to the dtype's range: a clamp before it keeps [0, 127].
    # Inputs at 8 times the output's range put most results past the bound.
    out = Act(0.02, zero_point, quant_max=127)
    model = QConv(act_in=U7_IN, act_out=out, relu=False)
    x = torch.randn(2, 8, 10, 10) * 8
    graph = check_int8(model, [x], out.scale, without_vnni=1)
    assert any(QUANTIZE in g and "aten::_convolution" in g for g in kinds(graph))
    result = run(fuse(model, [x])[0], [x])
    assert int(((result / out.scale) + zero_point).round().max()) == 127


def test_a_lone_narrow_quantize_stays_with_aten_and_its_dequantize_fuses() -> None:
    # oneDNN partitions the clamp that narrows a lone quantize apart from it; a
    # dequantize's range enters no arithmetic ((q - zero point) * scale in ATen and oneDNN).
    model, x = NarrowRange(), torch.randn(2, 8, 5, 5)
    _, out, graph = fuse(model, [x])
    assert torch.equal(out, eager(model, [x]))
    assert [g for g in kinds(graph) if DEQUANTIZE in g]
    assert not any(QUANTIZE in g for g in kinds(graph))


@pytest.mark.parametrize("model", [PerChannelActivation(), DynamicQuantization(),
                                   Float16Quantization()], ids=lambda m: type(m).__name__)
def test_unsupported_scheme_stays_with_aten_and_matches(model: nn.Module) -> None:
    x = torch.randn(2, 8, 5, 5)
    _, out, graph = fuse(model, [x])
    assert torch.equal(out, eager(model, [x]))
    assert not any(k.startswith("quantized_decomposed::") for g in kinds(graph) for k in g)
