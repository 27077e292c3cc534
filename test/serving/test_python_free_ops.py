"""The runtime library's copies of PT2E's quantize and dequantize ops give the bits torch's
Python definitions give, so a saved int8 model's unfused code computes what eager does."""

from __future__ import annotations

import pytest
import torch
from torch.ao.quantization.fx import _decomposed  # noqa: F401  (registers quantized_decomposed)

import torch_graphfuse  # noqa: F401  (loads the runtime library)
from torch_graphfuse.serving.python_free_ops import PORTABLE, replace_python_only_ops


def values() -> torch.Tensor:
    # Ties at .5 (round half to even), values past the range, zeros and tiny ones.
    x = torch.randn(4, 6, 5) * 3
    x[0, 0, :] = torch.tensor([0.5, 1.5, -2.5, 1e-30, 0.0]) * 0.02
    x[1, 1, :] = torch.tensor([1e6, -1e6, 7.62, -7.62, 300.0])
    return x


@pytest.mark.parametrize("dtype,qmin,qmax,zero_point", [
    (torch.uint8, 0, 255, 124), (torch.int8, -128, 127, 0), (torch.int8, -128, 127, -3)])
def test_per_tensor_ops_match_torchs(dtype: torch.dtype, qmin: int, qmax: int,
                                     zero_point: int) -> None:
    x, scale = values(), 0.02
    ours = torch.ops.graphfuse.quantize_per_tensor(x, scale, zero_point, qmin, qmax, dtype)
    theirs = torch.ops.quantized_decomposed.quantize_per_tensor(x, scale, zero_point, qmin,
                                                                qmax, dtype)
    assert torch.equal(ours, theirs)
    back = torch.ops.graphfuse.dequantize_per_tensor(ours, scale, zero_point, qmin, qmax, dtype)
    assert torch.equal(back, torch.ops.quantized_decomposed.dequantize_per_tensor(
        theirs, scale, zero_point, qmin, qmax, dtype))
    scale_t, zp_t = torch.tensor([scale]), torch.tensor([zero_point])
    assert torch.equal(
        torch.ops.graphfuse.quantize_per_tensor.tensor(x, scale_t, zp_t, qmin, qmax, dtype),
        torch.ops.quantized_decomposed.quantize_per_tensor.tensor(x, scale_t, zp_t, qmin, qmax,
                                                                  dtype))


@pytest.mark.parametrize("axis", [0, 1, 2])
def test_per_channel_ops_match_torchs(axis: int) -> None:
    x = values()
    channels = x.shape[axis]
    scales = torch.rand(channels) * 0.05 + 0.001
    zero_points = torch.randint(-5, 5, (channels,))
    args = (scales, zero_points, axis, -128, 127, torch.int8)
    ours = torch.ops.graphfuse.quantize_per_channel(x, *args)
    assert torch.equal(ours, torch.ops.quantized_decomposed.quantize_per_channel(x, *args))
    assert torch.equal(torch.ops.graphfuse.dequantize_per_channel(ours, *args),
                       torch.ops.quantized_decomposed.dequantize_per_channel(ours, *args))


def test_the_graphs_calls_are_renamed_with_their_inputs() -> None:
    graph = torch._C.parse_ir("""
graph(%x : Tensor):
  %s : float = prim::Constant[value=0.02]()
  %z : int = prim::Constant[value=3]()
  %lo : int = prim::Constant[value=-128]()
  %hi : int = prim::Constant[value=127]()
  %d : int = prim::Constant[value=1]()
  %q : Tensor = quantized_decomposed::quantize_per_tensor(%x, %s, %z, %lo, %hi, %d)
  %y : Tensor = quantized_decomposed::dequantize_per_tensor(%q, %s, %z, %lo, %hi, %d)
  return (%y)
""")
    assert replace_python_only_ops(graph) == 2
    kinds = [n.kind() for n in graph.nodes() if n.kind() != "prim::Constant"]
    assert kinds == ["graphfuse::quantize_per_tensor", "graphfuse::dequantize_per_tensor"]


@pytest.mark.parametrize("name", PORTABLE)
def test_the_runtime_library_defines_each_op_renamed_to(name: str) -> None:
    assert getattr(torch.ops.graphfuse, name).default._schema.name == f"graphfuse::{name}"
