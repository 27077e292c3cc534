"""int8: the quantization flows users have (torchao's PT2E, torch.ao's FX reference
models) give graphs that fuse into oneDNN Graph int8 partitions and match eager."""

from __future__ import annotations

import pytest
import torch
import torch.ao.quantization.fx._decomposed  # noqa: F401 (registers quantized_decomposed)
from fusion_check import eager, fuse
from int8_models import DEQUANTIZE, WEIGHT, fused_where_vnni, kinds
from torch import nn

import torch_graphfuse
from torch_graphfuse.testing import runner


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
