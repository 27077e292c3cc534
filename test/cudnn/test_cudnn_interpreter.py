"""The CPU reference interpreter of the cuDNN IR against eager torch: hand-built
IR graphs pin each node kind, mode, layout, broadcasting and precision rule, and
what the interpreter refuses, and that it computes on its inputs' device. Every
lowered pattern against eager: test_cudnn_lowering_semantics.py.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from torch_graphfuse.backends.cudnn import interpreter, ir, special_values
from torch_graphfuse.backends.cudnn.ir_maker import Maker, nhwc

DTYPES = {torch.float32: "float", torch.float16: "half", torch.bfloat16: "bfloat16"}
# Tolerances of a result rounded once to the io type, against fp32 eager.
TOLERANCE = {torch.float32: (1e-5, 1e-5), torch.float16: (2e-3, 2e-3),
             torch.bfloat16: (2e-2, 2e-2)}


def run1(graph: ir.Graph, *inputs: torch.Tensor) -> torch.Tensor:
    (out,) = interpreter.run(graph, list(inputs))
    return out


# -- conv_fprop -------------------------------------------------------------------


@pytest.mark.parametrize("stride,padding,dilation", [
    ([1, 1], [0, 0], [1, 1]), ([2, 1], [1, 2], [1, 1]), ([1, 2], [2, 1], [2, 1])])
def test_conv_fprop_matches_torch_conv2d(stride, padding, dilation):
    x, w = torch.randn(2, 3, 9, 8), torch.randn(5, 3, 3, 3)
    expected = F.conv2d(x, w, None, stride, padding, dilation)
    m = Maker()
    tx, tw = m.input([2, 3, 9, 8]), m.input([5, 3, 3, 3])
    y = m.output(m.node("conv_fprop", {"X": tx, "W": tw}, m.tensor(list(expected.shape)),
                        padding=padding, stride=stride, dilation=dilation))
    assert y == 2
    torch.testing.assert_close(run1(m.graph, x, w), expected)


def test_conv_fprop_groups_follow_from_the_weights_channels():
    x, w = torch.randn(1, 6, 5, 5), torch.randn(6, 1, 3, 3)  # depthwise
    m = Maker()
    tx, tw = m.input([1, 6, 5, 5]), m.input([6, 1, 3, 3])
    m.output(m.node("conv_fprop", {"X": tx, "W": tw}, m.tensor([1, 6, 5, 5]),
                    padding=[1, 1], stride=[1, 1], dilation=[1, 1]))
    torch.testing.assert_close(run1(m.graph, x, w), F.conv2d(x, w, padding=1, groups=6))


def test_channels_last_conv_reads_and_writes_nhwc_memory():
    x = torch.randn(2, 4, 6, 6).to(memory_format=torch.channels_last)
    w = torch.randn(8, 4, 3, 3).to(memory_format=torch.channels_last)
    m = Maker()
    tx = m.input([2, 4, 6, 6], nhwc([2, 4, 6, 6]))
    tw = m.input([8, 4, 3, 3], nhwc([8, 4, 3, 3]))
    m.output(m.node("conv_fprop", {"X": tx, "W": tw},
                    m.tensor([2, 8, 6, 6], nhwc([2, 8, 6, 6])),
                    padding=[1, 1], stride=[1, 1], dilation=[1, 1]))
    out = run1(m.graph, x, w)
    assert out.stride() == tuple(nhwc([2, 8, 6, 6]))
    torch.testing.assert_close(out, F.conv2d(x, w, padding=1))


def test_inputs_are_read_through_the_ir_strides_not_the_tensors_own():
    # An NCHW tensor handed where the IR says NHWC is reinterpreted, as cuDNN
    # would read the same memory: a layout bug in a lowering shows up here.
    x, w = torch.randn(1, 3, 4, 4), torch.randn(2, 3, 1, 1)
    m = Maker()
    tx = m.input([1, 3, 4, 4], nhwc([1, 3, 4, 4]))
    tw = m.input([2, 3, 1, 1])
    m.output(m.node("conv_fprop", {"X": tx, "W": tw}, m.tensor([1, 2, 4, 4]),
                    padding=[0, 0], stride=[1, 1], dilation=[1, 1]))
    as_nhwc = x.as_strided([1, 3, 4, 4], nhwc([1, 3, 4, 4]))
    out = run1(m.graph, x, w)
    torch.testing.assert_close(out, F.conv2d(as_nhwc, w))
    assert not torch.allclose(out, F.conv2d(x, w))


# -- matmul -------------------------------------------------------------------------


def test_matmul_broadcasts_a_batch_dim_of_one():
    a, b = torch.randn(3, 4, 5), torch.randn(1, 5, 6)
    m = Maker()
    ta, tb = m.input([3, 4, 5]), m.input([1, 5, 6])
    m.output(m.node("matmul", {"A": ta, "B": tb}, m.tensor([3, 4, 6])))
    torch.testing.assert_close(run1(m.graph, a, b), a @ b)


def test_matmul_reads_a_transposed_weight_through_strides():
    # A linear's weight [N, K] is B [1, K, N] with strides [N*K, 1, K].
    a, weight = torch.randn(1, 4, 5), torch.randn(6, 5)
    m = Maker()
    ta, tb = m.input([1, 4, 5]), m.input([1, 5, 6], [30, 1, 5])
    m.output(m.node("matmul", {"A": ta, "B": tb}, m.tensor([1, 4, 6])))
    torch.testing.assert_close(run1(m.graph, a, weight), F.linear(a, weight))


# -- pointwise ----------------------------------------------------------------------

UNARY = {
    "identity": lambda x: x, "neg": torch.neg, "abs": torch.abs, "exp": torch.exp,
    "erf": torch.erf, "sin": torch.sin, "cos": torch.cos, "tan": torch.tan,
    "ceil": torch.ceil, "floor": torch.floor,
    "relu_fwd": torch.relu, "tanh_fwd": torch.tanh, "sigmoid_fwd": torch.sigmoid,
    "gelu_fwd": F.gelu, "gelu_approx_tanh_fwd": lambda x: F.gelu(x, approximate="tanh"),
    "swish_fwd": F.silu, "elu_fwd": F.elu, "softplus_fwd": F.softplus,
}
POSITIVE_UNARY = {"log": torch.log, "sqrt": torch.sqrt, "rsqrt": torch.rsqrt,
                  "reciprocal": torch.reciprocal}
BINARY = {"add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div,
          "max": torch.maximum, "min": torch.minimum, "pow": torch.pow}


def unary_graph(mode: str, dims: list[int], **attrs: object) -> ir.Graph:
    m = Maker()
    x = m.input(dims)
    m.output(m.node("pointwise", {"IN_0": x}, m.tensor(dims), mode=mode, **attrs))
    return m.graph


@pytest.mark.parametrize("mode", sorted(UNARY))
def test_unary_pointwise_mode_matches_eager(mode):
    x = torch.randn(2, 3, 4, 5) * 3
    torch.testing.assert_close(run1(unary_graph(mode, [2, 3, 4, 5]), x), UNARY[mode](x))


@pytest.mark.parametrize("mode", sorted(POSITIVE_UNARY))
def test_unary_pointwise_mode_on_positive_inputs_matches_eager(mode):
    x = torch.rand(2, 3, 4) + 0.5
    torch.testing.assert_close(run1(unary_graph(mode, [2, 3, 4]), x), POSITIVE_UNARY[mode](x))


@pytest.mark.parametrize("mode", sorted(BINARY))
def test_binary_pointwise_mode_matches_eager(mode):
    a, b = torch.rand(2, 3, 4) + 0.5, torch.randn(2, 3, 4)
    m = Maker()
    ta, tb = m.input([2, 3, 4]), m.input([2, 3, 4])
    m.output(m.node("pointwise", {"IN_0": ta, "IN_1": tb}, m.tensor([2, 3, 4]), mode=mode))
    torch.testing.assert_close(run1(m.graph, a, b), BINARY[mode](a, b))


def test_relu_clips_give_relu6():
    x = torch.randn(100) * 5
    graph = unary_graph("relu_fwd", [100], relu_lower_clip=0.0, relu_upper_clip=6.0)
    torch.testing.assert_close(run1(graph, x), F.relu6(x))


def test_relu_lower_clip_slope_scales_below_the_lower_clip():
    x = torch.linspace(-4, 4, 81)
    graph = unary_graph("relu_fwd", [81], relu_lower_clip=-1.0, relu_lower_clip_slope=0.25)
    expected = torch.where(x < -1, -1 + 0.25 * (x + 1), x)
    torch.testing.assert_close(run1(graph, x), expected)
    leaky = unary_graph("relu_fwd", [81], relu_lower_clip_slope=0.1)
    torch.testing.assert_close(run1(leaky, x), F.leaky_relu(x, 0.1))


def test_swish_beta_is_honoured():
    x = torch.randn(50) * 3
    torch.testing.assert_close(run1(unary_graph("swish_fwd", [50], swish_beta=1.702), x),
                               x * torch.sigmoid(1.702 * x))


def test_relu_propagates_nan_and_clips_inf_to_the_float_maximum():
    x = torch.tensor([math.nan, math.inf, -math.inf, 1.0])
    out = run1(unary_graph("relu_fwd", [4]), x)
    assert math.isnan(out[0])
    assert out[1:].tolist() == [torch.finfo(torch.float32).max, 0.0, 1.0]


@pytest.mark.parametrize("other_dims", [[1, 4, 1, 1], [1, 1, 1, 1], [2, 1, 3, 1], [1, 4, 3, 5]])
def test_pointwise_broadcasts_along_dims_of_one(other_dims):
    a, b = torch.randn(2, 4, 3, 5), torch.randn(other_dims)
    m = Maker()
    ta, tb = m.input([2, 4, 3, 5]), m.input(other_dims)
    m.output(m.node("pointwise", {"IN_0": ta, "IN_1": tb}, m.tensor([2, 4, 3, 5]), mode="add"))
    torch.testing.assert_close(run1(m.graph, a, b), a + b)


@pytest.mark.parametrize("other_dims", [[4], [1, 4, 1], [1, 2, 1, 1]])
def test_pointwise_refuses_broadcasts_cudnn_does_not_make(other_dims):
    # Torch would broadcast [4] or a lower rank; cuDNN wants equal ranks.
    m = Maker()
    ta, tb = m.input([2, 4, 3, 5]), m.input(other_dims)
    m.output(m.node("pointwise", {"IN_0": ta, "IN_1": tb}, m.tensor([2, 4, 3, 5]), mode="add"))
    with pytest.raises(ValueError, match="broadcast"):
        interpreter.run(m.graph, [torch.randn(2, 4, 3, 5), torch.randn(other_dims)])


@pytest.mark.parametrize("mode,scalar", [("mul", 0.5), ("max", -1.0), ("min", 2.0),
                                         ("sub", 3.0), ("div", 4.0)])
def test_scalar_attribute_is_the_second_operand(mode, scalar):
    x = torch.randn(2, 3, 4) * 3
    m = Maker()
    tx = m.input([2, 3, 4])
    m.output(m.node("pointwise", {"IN_0": tx}, m.tensor([2, 3, 4]), mode=mode, scalar=scalar))
    torch.testing.assert_close(run1(m.graph, x), BINARY[mode](x, torch.tensor(scalar)))


def test_scalar_attribute_on_a_unary_mode_is_refused():
    with pytest.raises(ValueError, match="a scalar and no tensor input"):
        interpreter.run(unary_graph("relu_fwd", [3], scalar=1.0), [torch.randn(3)])


# -- reduction ----------------------------------------------------------------------

REDUCTIONS = {
    "add": lambda x, d: x.sum(d, keepdim=True),
    "avg": lambda x, d: x.mean(d, keepdim=True),
    "max": lambda x, d: x.amax(d, keepdim=True),
    "min": lambda x, d: x.amin(d, keepdim=True),
    "amax": lambda x, d: x.abs().amax(d, keepdim=True),
    "norm1": lambda x, d: torch.linalg.vector_norm(x, 1, d, keepdim=True),
    "norm2": lambda x, d: torch.linalg.vector_norm(x, 2, d, keepdim=True),
    "mul": lambda x, d: x.prod(d[0], keepdim=True),
}


@pytest.mark.parametrize("mode", sorted(REDUCTIONS))
def test_reduction_over_the_channel_dim_matches_eager(mode):
    x = torch.rand(2, 5, 3, 3) + 0.5
    m = Maker()
    tx = m.input([2, 5, 3, 3])
    m.output(m.node("reduction", {"X": tx}, m.tensor([2, 1, 3, 3]), mode=mode))
    torch.testing.assert_close(run1(m.graph, x), REDUCTIONS[mode](x, [1]))


def test_reduction_reduces_every_dim_whose_output_is_one():
    x = torch.randn(2, 5, 3, 4)
    m = Maker()
    tx = m.input([2, 5, 3, 4])
    m.output(m.node("reduction", {"X": tx}, m.tensor([1, 5, 1, 1]), mode="add"))
    torch.testing.assert_close(run1(m.graph, x), x.sum([0, 2, 3], keepdim=True))


def test_mul_no_zeros_reduction_skips_zeros():
    x = torch.tensor([[2.0, 0.0, 3.0], [0.0, 0.0, 0.0]])
    m = Maker()
    tx = m.input([2, 3])
    m.output(m.node("reduction", {"X": tx}, m.tensor([2, 1]), mode="mul_no_zeros"))
    assert run1(m.graph, x).flatten().tolist() == [6.0, 1.0]


# -- precision ----------------------------------------------------------------------


def identity_chain(intermediate: str) -> ir.Graph:
    m = Maker(intermediate=intermediate)
    x = m.input([1])
    mid = m.node("pointwise", {"IN_0": x}, m.tensor([1], virtual=True), mode="identity")
    m.output(m.node("pointwise", {"IN_0": mid}, m.tensor([1]), mode="identity"))
    return m.graph


def test_virtual_tensors_are_rounded_to_their_dtype():
    x = torch.tensor([1 + 2.0**-12])  # representable in float, not in half
    assert run1(identity_chain("float"), x).item() == 1 + 2.0**-12
    assert run1(identity_chain("half"), x).item() == 1.0


def test_nodes_compute_in_the_compute_dtype():
    def add_graph(compute: str) -> ir.Graph:
        m = Maker(io="half", compute=compute)
        a, b = m.input([1]), m.input([1])
        m.output(m.node("pointwise", {"IN_0": a, "IN_1": b}, m.tensor([1], dtype="float"),
                        mode="add"))
        return m.graph

    a, b = torch.tensor([2048.0], dtype=torch.half), torch.tensor([1.0], dtype=torch.half)
    assert run1(add_graph("float"), a, b).item() == 2049.0  # exact in float
    assert run1(add_graph("half"), a, b).item() == 2048.0  # 2049 is not a half


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_conv_bias_relu_in_io_dtype_is_close_to_fp32_eager(dtype):
    x, w, bias = torch.randn(2, 8, 7, 7), torch.randn(16, 8, 3, 3) / 8, torch.randn(1, 16, 1, 1)
    x, w, bias = x.to(dtype), w.to(dtype), bias.to(dtype)
    m = Maker(io=DTYPES[dtype])
    tx, tw, tb = m.input([2, 8, 7, 7]), m.input([16, 8, 3, 3]), m.input([1, 16, 1, 1])
    conv = m.node("conv_fprop", {"X": tx, "W": tw}, m.tensor([2, 16, 7, 7], virtual=True),
                  padding=[1, 1], stride=[1, 1], dilation=[1, 1])
    biased = m.node("pointwise", {"IN_0": conv, "IN_1": tb},
                    m.tensor([2, 16, 7, 7], virtual=True), mode="add")
    m.output(m.node("pointwise", {"IN_0": biased}, m.tensor([2, 16, 7, 7]), mode="relu_fwd"))
    out = run1(m.graph, x, w, bias)
    assert out.dtype == dtype
    expected = torch.relu(F.conv2d(x.float(), w.float(), padding=1) + bias.float())
    atol, rtol = TOLERANCE[dtype]
    torch.testing.assert_close(out.float(), expected, atol=atol, rtol=rtol)


# -- what it refuses ----------------------------------------------------------------


def test_unknown_pointwise_mode_is_refused():
    with pytest.raises(ValueError, match="unknown mode 'mish_fwd'"):
        interpreter.run(unary_graph("mish_fwd", [3]), [torch.randn(3)])


def test_unknown_reduction_mode_is_refused():
    m = Maker()
    tx = m.input([2, 3])
    m.output(m.node("reduction", {"X": tx}, m.tensor([2, 1]), mode="median"))
    with pytest.raises(ValueError, match="unknown mode 'median'"):
        interpreter.run(m.graph, [torch.randn(2, 3)])


def test_unknown_attribute_is_refused():
    with pytest.raises(ValueError, match="unknown attributes"):
        interpreter.run(unary_graph("tanh_fwd", [3], swish_beta=2.0), [torch.randn(3)])


def test_wrong_port_names_are_refused():
    m = Maker()
    ta, tb = m.input([2, 3]), m.input([2, 3])
    m.output(m.node("pointwise", {"IN_0": ta, "IN_2": tb}, m.tensor([2, 3]), mode="add"))
    with pytest.raises(ValueError, match="ports"):
        interpreter.run(m.graph, [torch.randn(2, 3), torch.randn(2, 3)])


def test_ir_dims_that_disagree_with_the_computation_are_refused():
    m = Maker()
    tx, tw = m.input([1, 3, 6, 6]), m.input([4, 3, 3, 3])
    m.output(m.node("conv_fprop", {"X": tx, "W": tw}, m.tensor([1, 4, 6, 6]),
                    padding=[0, 0], stride=[1, 1], dilation=[1, 1]))  # gives 4x4
    with pytest.raises(ValueError, match="computes dims"):
        interpreter.run(m.graph, [torch.randn(1, 3, 6, 6), torch.randn(4, 3, 3, 3)])


def test_matmul_with_mismatched_inner_dims_is_refused():
    m = Maker()
    ta, tb = m.input([1, 4, 5]), m.input([1, 4, 6])
    m.output(m.node("matmul", {"A": ta, "B": tb}, m.tensor([1, 4, 6])))
    with pytest.raises(ValueError, match="do not multiply"):
        interpreter.run(m.graph, [torch.randn(1, 4, 5), torch.randn(1, 4, 6)])


def test_inputs_of_the_wrong_dtype_or_count_or_size_are_refused():
    graph = unary_graph("identity", [2, 3])
    with pytest.raises(ValueError, match="dtype"):
        interpreter.run(graph, [torch.randn(2, 3, dtype=torch.half)])
    with pytest.raises(ValueError, match="takes 1 inputs"):
        interpreter.run(graph, [torch.randn(2, 3), torch.randn(2, 3)])
    with pytest.raises(ValueError, match="reach past"):
        interpreter.run(graph, [torch.randn(5)])


def test_outputs_whose_strides_overlap_are_refused():
    m = Maker()
    x = m.input([2, 3])
    m.output(m.node("pointwise", {"IN_0": x}, m.tensor([2, 3], [1, 1]), mode="identity"))
    with pytest.raises(ValueError, match="share memory"):
        interpreter.run(m.graph, [torch.randn(2, 3)])


def test_executor_runs_the_json_description():
    graph = unary_graph("sigmoid_fwd", [4, 4])
    x = torch.randn(4, 4)
    run = interpreter.executor(graph.to_json())
    torch.testing.assert_close(run([x])[0], torch.sigmoid(x))


# -- on the inputs' device ----------------------------------------------------------


@pytest.mark.parametrize("case", special_values.CASES, ids=lambda c: c.name)
def test_interpreter_computes_on_the_inputs_device(case: special_values.Case) -> None:
    """The runtime probes GPU plans against the interpreter on the GPU: nothing it makes
    (a clamp's bound, say) may land on the CPU. The meta device stands in for CUDA."""
    graph = case.graph("half")
    like = [torch.empty_strided(t.dims, t.strides, dtype=torch.half, device="meta")
            for t in (graph.tensor(tid) for tid in graph.inputs)]
    assert [y.device.type for y in interpreter.run(graph, like)] == ["meta"]
