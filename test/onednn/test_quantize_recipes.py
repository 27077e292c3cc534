"""The int8 quantization recipes of torch_graphfuse.testing.quantize: each produces the ops it
says, in the GraphModule and in the traced + frozen TorchScript graph, runs, and stays within
a quantization-sized distance of the float model."""

from __future__ import annotations

import collections
import re
import warnings
from collections.abc import Callable

import pytest
import torch
from torch import nn

import torch_graphfuse
from torch_graphfuse.testing import quantize
from torch_graphfuse.testing.models import BasicBlock

pytest.importorskip("torchao")

Recipe = Callable[..., torch.fx.GraphModule]
Case = tuple[nn.Module, list[torch.Tensor], list[list[torch.Tensor]]]

# Max abs difference to the float model, as a fraction of the float output's largest value:
# a few 8-bit steps through two or three quantized layers.
RELATIVE_TOLERANCE = 0.05


def conv_case() -> Case:
    """A ResNet basic block with a strided 1x1 downsample: conv, batch norm, relu, residual."""
    model = BasicBlock(8, 16, stride=2).eval()
    return model, [torch.randn(2, 8, 12, 12)], [[torch.randn(2, 8, 12, 12)] for _ in range(4)]


def linear_case() -> Case:
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 16)).eval()
    return model, [torch.randn(4, 32)], [[torch.randn(4, 32)] for _ in range(4)]


CASES = {"conv": conv_case, "linear": linear_case}
COMPUTE = {"conv": "aten::_convolution", "linear": "aten::linear"}


def kinds(module: torch.jit.ScriptModule) -> collections.Counter[str]:
    return collections.Counter(n.kind() for n in module.graph.nodes()
                               if not n.kind().startswith("prim::"))


def dequantized_consumers(module: torch.jit.ScriptModule, dequantize: str) -> set[str]:
    return {use.user.kind() for n in module.graph.nodes() if n.kind() == dequantize
            for use in n.output().uses()}


def assert_near_float(model: nn.Module, quantized: Callable[..., torch.Tensor],
                      inputs: list[torch.Tensor]) -> None:
    with torch.no_grad(), quantize.quiet_deprecations():
        expected, out = model(*inputs), quantized(*inputs)
    error = (out - expected).abs().max().item()
    assert 0 < error <= RELATIVE_TOLERANCE * expected.abs().max().item()


@pytest.mark.parametrize("case", sorted(CASES))
def test_pt2e(case: str) -> None:
    model, inputs, calibration = CASES[case]()
    gm = quantize.pt2e(model, inputs, calibration)
    targets = {str(n.target) for n in gm.graph.nodes if n.op == "call_function"}
    assert {"quantized_decomposed.quantize_per_tensor.default",
            "quantized_decomposed.dequantize_per_tensor.default",
            "quantized_decomposed.dequantize_per_channel.default"} <= targets
    # u8 activations, s8 weights, as plain integer tensors
    dtypes = {n.args[-1] for n in gm.graph.nodes if n.op == "call_function"
              and "quantize_per" in str(n.target)}
    assert dtypes == {torch.uint8, torch.int8}
    assert_near_float(model, gm, inputs)

    frozen = quantize.freeze_quantized(gm, inputs)
    ops = kinds(frozen)
    assert ops["quantized_decomposed::quantize_per_tensor"] >= 2
    assert ops["quantized_decomposed::dequantize_per_tensor"] >= 2
    # freezing folds the weights' dequantize_per_channel into float constants
    assert ops["quantized_decomposed::dequantize_per_channel"] == 0
    assert COMPUTE[case] in dequantized_consumers(
        frozen, "quantized_decomposed::dequantize_per_tensor")
    with torch.no_grad():
        torch.testing.assert_close(frozen(*inputs), gm(*inputs), rtol=0, atol=1e-6)


@pytest.mark.parametrize("case", sorted(CASES))
def test_fx_reference(case: str) -> None:
    model, inputs, calibration = CASES[case]()
    gm = quantize.fx_reference(model, inputs, calibration)
    assert_near_float(model, gm, inputs)

    frozen = quantize.freeze_quantized(gm, inputs)
    ops = kinds(frozen)
    assert ops["aten::quantize_per_tensor"] >= 2
    # activations and weights both dequantized: the weights stay qint8 constants
    assert ops["aten::dequantize"] >= ops["aten::quantize_per_tensor"] + ops[COMPUTE[case]]
    assert COMPUTE[case] in dequantized_consumers(frozen, "aten::dequantize")
    weights = [n.output().type() for n in frozen.graph.nodes() if n.kind() == "prim::Constant"
               and isinstance(n.output().type(), torch._C.TensorType)]
    assert any(t.dtype() == torch.qint8 for t in weights)
    with torch.no_grad(), quantize.quiet_deprecations():
        torch.testing.assert_close(frozen(*inputs), gm(*inputs), rtol=0, atol=1e-6)


@pytest.mark.skipif(not torch_graphfuse.onednn_info()["vnni"],
                    reason="torch's own x86 int8 engine (this recipe's model, the benchmark's "
                           "eager int8 peer) saturates u8 x s8 products without VNNI")
@pytest.mark.parametrize("case", sorted(CASES))
def test_fx_fbgemm(case: str) -> None:
    model, inputs, calibration = CASES[case]()
    gm = quantize.fx_fbgemm(model, inputs, calibration)
    assert torch.backends.quantized.engine == "x86"
    quantized_modules = {type(m).__module__ for m in gm.modules()}
    assert any(name.startswith(("torch.ao.nn.quantized", "torch.ao.nn.intrinsic.quantized"))
               for name in quantized_modules)
    assert_near_float(model, gm, inputs)
    # the same observers as the reference model: within one output quantization step of it
    reference = quantize.fx_reference(model, inputs, calibration)
    with torch.no_grad(), quantize.quiet_deprecations():
        out, expected = gm(*inputs), reference(*inputs)
    step = (expected.max() - expected.min()).item() / 127  # reduce_range: 7-bit activations
    assert (out - expected).abs().max().item() <= step


def test_fx_only_linear() -> None:
    """`only` restricts the FX recipes to some module types: the GELU between the linears is
    then not observed, and just the linears' inputs and outputs are quantized."""
    model = nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 16)).eval()
    inputs, calibration = [torch.randn(4, 32)], [[torch.randn(4, 32)] for _ in range(4)]
    gm = quantize.fx_reference(model, inputs, calibration, only=(nn.Linear,))
    frozen = quantize.freeze_quantized(gm, inputs)
    assert kinds(frozen)["aten::quantize_per_tensor"] == 4  # two inputs, two outputs
    assert_near_float(model, gm, inputs)


def test_fx_recipes_silence_quantized_dtype_deprecations() -> None:
    model, inputs, calibration = linear_case()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        quantize.fx_reference(model, inputs, calibration)
        quantize.fx_fbgemm(model, inputs, calibration)
    silenced = re.compile("|".join(quantize.DEPRECATIONS))
    assert not [w for w in caught if silenced.search(str(w.message))]
