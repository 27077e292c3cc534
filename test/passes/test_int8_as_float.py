"""int8 as float: where int8 products saturate (a CPU without VNNI), a quantized
activation only dequantize nodes read becomes graphfuse::fake_quantize_per_tensor, which
ATen computes with the pair's own calls and oneDNN as an fp32 chain fused into the
convolution before it. Forced here on every CPU: the pass and its mapping do not depend
on the ISA."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
import torch.ao.quantization.fx._decomposed  # noqa: F401 (registers quantized_decomposed)
from fusion_check import eager, fuse, run
from torch import nn

from torch_graphfuse import pipeline
from torch_graphfuse.passes.int8_as_float import FAKE_QUANTIZE

sys.path.insert(0, str(Path(__file__).parents[1] / "onednn"))
from int8_models import U7_IN, U8_OUT, Act, QBlock, QConv, images, kinds, qd  # noqa: E402

QUANTIZED = "quantized_decomposed::"


@pytest.fixture(autouse=True)
def int8_saturates(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pipeline, "_int8_saturates", lambda devices: True)


def _special(x: torch.Tensor, scale: float) -> torch.Tensor:
    """x with NaN, infinities, -0.0 and values half a step apart from a rounding tie."""
    x = x.clone()
    flat = x.view(-1)
    flat[:6] = torch.tensor([float("nan"), float("inf"), -float("inf"), -0.0, 2.5 * scale,
                             -1.5 * scale])
    return x


@pytest.mark.parametrize("model", [QConv(), QConv(act_in=Act(0.03, -5, torch.int8)), QBlock()],
                         ids=["u8", "s8", "block"])
def test_fused_in_float_with_the_convolution_and_eager_on_every_value(model: nn.Module) -> None:
    inputs = images()
    module, out, graph = fuse(model, inputs)
    assert torch.equal(out, eager(model, inputs))
    groups = kinds(graph)
    assert any("aten::_convolution" in g and FAKE_QUANTIZE in g for g in groups), groups
    assert not any(k.startswith(QUANTIZED) for g in groups for k in g)
    assert not any(n.kind().startswith(QUANTIZED) for n in graph.nodes())
    # NaN and infinities run the groups unfused (the op's ATen calls cast NaN to an integer).
    special = [_special(inputs[0], 0.03)]
    assert torch.equal(run(module, special), eager(model, special))


def test_7_bit_activations_stay_int8() -> None:
    # u8 quantized to at most 128 cannot saturate: oneDNN's int8 kernels take it.
    model, inputs = QConv(act_in=U7_IN), images()
    _, out, graph = fuse(model, inputs)
    assert (out - eager(model, inputs)).abs().max() <= U8_OUT.scale * 1.001
    conv = [g for g in kinds(graph) if "aten::_convolution" in g]
    assert conv and all(f"{QUANTIZED}dequantize_per_channel" in g and
                        f"{QUANTIZED}dequantize_per_tensor" in g for g in conv), conv


class ReturnsTheIntegers(nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        q = qd.quantize_per_tensor(x, 0.03, 10, 0, 255, torch.uint8)
        return q, torch.relu(qd.dequantize_per_tensor(q, 0.03, 10, 0, 255, torch.uint8))


def test_a_quantized_value_read_other_than_by_dequantize_stays() -> None:
    model, inputs = ReturnsTheIntegers(), [torch.randn(2, 8, 5, 5)]
    _, out, graph = fuse(model, inputs)
    ref = eager(model, inputs)
    assert all(torch.equal(a, b) for a, b in zip(out, ref, strict=True))
    assert FAKE_QUANTIZE not in [n.kind() for n in graph.nodes()]
