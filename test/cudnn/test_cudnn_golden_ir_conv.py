"""Golden IR of the catalog's groups with a convolution anchor (conv_patterns.py), in
golden_ir.py's lines: the contract the builder compiles and the interpreter runs.
Regenerate these and the matmul goldens with `EXPECTTEST_ACCEPT=1 python -m pytest
test/cudnn/test_cudnn_golden_ir_conv.py test/cudnn/test_cudnn_golden_ir_matmul.py`
and read the diff: a changed golden is a changed contract."""
# ruff: noqa: E501  (a golden line is one JSON object, as long as it is)

from __future__ import annotations

import expecttest
from golden_ir import golden


class TestConvGoldenIR(expecttest.TestCase):
    def test_conv_bias_relu_half(self) -> None:
        self.assertExpectedInline(golden("conv_bias_relu_half"), """\
{"compute_dtype": "float", "inputs": [0, 1, 2], "intermediate_dtype": "float", "io_dtype": "half", "outputs": [5], "version": 1}
{"dims": [2, 16, 8, 8], "dtype": "half", "id": 0, "strides": [1024, 64, 8, 1], "virtual": false}
{"dims": [32, 16, 3, 3], "dtype": "half", "id": 1, "strides": [144, 9, 3, 1], "virtual": false}
{"dims": [1, 32, 1, 1], "dtype": "half", "id": 2, "strides": [32, 1, 1, 1], "virtual": false}
{"dims": [2, 32, 8, 8], "dtype": "float", "id": 3, "strides": [2048, 64, 8, 1], "virtual": true}
{"dims": [2, 32, 8, 8], "dtype": "float", "id": 4, "strides": [2048, 64, 8, 1], "virtual": true}
{"dims": [2, 32, 8, 8], "dtype": "half", "id": 5, "strides": [2048, 64, 8, 1], "virtual": false}
{"attrs": {"dilation": [1, 1], "padding": [1, 1], "stride": [1, 1]}, "inputs": {"W": 1, "X": 0}, "op": "conv_fprop", "outputs": {"Y": 3}}
{"attrs": {"mode": "add"}, "inputs": {"IN_0": 3, "IN_1": 2}, "op": "pointwise", "outputs": {"OUT_0": 4}}
{"attrs": {"mode": "relu_fwd"}, "inputs": {"IN_0": 4}, "op": "pointwise", "outputs": {"OUT_0": 5}}""")

    def test_conv_bias_relu_bf16(self) -> None:
        self.assertExpectedInline(golden("conv_bias_relu_bf16"), """\
{"compute_dtype": "float", "inputs": [0, 1, 2], "intermediate_dtype": "float", "io_dtype": "bfloat16", "outputs": [5], "version": 1}
{"dims": [2, 16, 8, 8], "dtype": "bfloat16", "id": 0, "strides": [1024, 64, 8, 1], "virtual": false}
{"dims": [32, 16, 3, 3], "dtype": "bfloat16", "id": 1, "strides": [144, 9, 3, 1], "virtual": false}
{"dims": [1, 32, 1, 1], "dtype": "bfloat16", "id": 2, "strides": [32, 1, 1, 1], "virtual": false}
{"dims": [2, 32, 8, 8], "dtype": "float", "id": 3, "strides": [2048, 64, 8, 1], "virtual": true}
{"dims": [2, 32, 8, 8], "dtype": "float", "id": 4, "strides": [2048, 64, 8, 1], "virtual": true}
{"dims": [2, 32, 8, 8], "dtype": "bfloat16", "id": 5, "strides": [2048, 64, 8, 1], "virtual": false}
{"attrs": {"dilation": [1, 1], "padding": [1, 1], "stride": [1, 1]}, "inputs": {"W": 1, "X": 0}, "op": "conv_fprop", "outputs": {"Y": 3}}
{"attrs": {"mode": "add"}, "inputs": {"IN_0": 3, "IN_1": 2}, "op": "pointwise", "outputs": {"OUT_0": 4}}
{"attrs": {"mode": "relu_fwd"}, "inputs": {"IN_0": 4}, "op": "pointwise", "outputs": {"OUT_0": 5}}""")

    def test_conv_bias_relu_float(self) -> None:
        self.assertExpectedInline(golden("conv_bias_relu_float"), """\
{"compute_dtype": "float", "inputs": [0, 1, 2], "intermediate_dtype": "float", "io_dtype": "float", "outputs": [5], "version": 1}
{"dims": [2, 16, 8, 8], "dtype": "float", "id": 0, "strides": [1024, 64, 8, 1], "virtual": false}
{"dims": [32, 16, 3, 3], "dtype": "float", "id": 1, "strides": [144, 9, 3, 1], "virtual": false}
{"dims": [1, 32, 1, 1], "dtype": "float", "id": 2, "strides": [32, 1, 1, 1], "virtual": false}
{"dims": [2, 32, 8, 8], "dtype": "float", "id": 3, "strides": [2048, 64, 8, 1], "virtual": true}
{"dims": [2, 32, 8, 8], "dtype": "float", "id": 4, "strides": [2048, 64, 8, 1], "virtual": true}
{"dims": [2, 32, 8, 8], "dtype": "float", "id": 5, "strides": [2048, 64, 8, 1], "virtual": false}
{"attrs": {"dilation": [1, 1], "padding": [1, 1], "stride": [1, 1]}, "inputs": {"W": 1, "X": 0}, "op": "conv_fprop", "outputs": {"Y": 3}}
{"attrs": {"mode": "add"}, "inputs": {"IN_0": 3, "IN_1": 2}, "op": "pointwise", "outputs": {"OUT_0": 4}}
{"attrs": {"mode": "relu_fwd"}, "inputs": {"IN_0": 4}, "op": "pointwise", "outputs": {"OUT_0": 5}}""")

    def test_conv_bias_relu_channels_last_half(self) -> None:
        self.assertExpectedInline(golden("conv_bias_relu_channels_last_half"), """\
{"compute_dtype": "float", "inputs": [0, 1, 2], "intermediate_dtype": "float", "io_dtype": "half", "outputs": [5], "version": 1}
{"dims": [2, 16, 8, 8], "dtype": "half", "id": 0, "strides": [1024, 1, 128, 16], "virtual": false}
{"dims": [32, 16, 3, 3], "dtype": "half", "id": 1, "strides": [144, 1, 48, 16], "virtual": false}
{"dims": [1, 32, 1, 1], "dtype": "half", "id": 2, "strides": [32, 1, 32, 32], "virtual": false}
{"dims": [2, 32, 8, 8], "dtype": "float", "id": 3, "strides": [2048, 1, 256, 32], "virtual": true}
{"dims": [2, 32, 8, 8], "dtype": "float", "id": 4, "strides": [2048, 1, 256, 32], "virtual": true}
{"dims": [2, 32, 8, 8], "dtype": "half", "id": 5, "strides": [2048, 1, 256, 32], "virtual": false}
{"attrs": {"dilation": [1, 1], "padding": [1, 1], "stride": [1, 1]}, "inputs": {"W": 1, "X": 0}, "op": "conv_fprop", "outputs": {"Y": 3}}
{"attrs": {"mode": "add"}, "inputs": {"IN_0": 3, "IN_1": 2}, "op": "pointwise", "outputs": {"OUT_0": 4}}
{"attrs": {"mode": "relu_fwd"}, "inputs": {"IN_0": 4}, "op": "pointwise", "outputs": {"OUT_0": 5}}""")

    def test_conv2d_residual_add_relu_bf16(self) -> None:
        self.assertExpectedInline(golden("conv2d_residual_add_relu_bf16"), """\
{"compute_dtype": "float", "inputs": [0, 1, 2, 3], "intermediate_dtype": "float", "io_dtype": "bfloat16", "outputs": [7], "version": 1}
{"dims": [2, 16, 8, 8], "dtype": "bfloat16", "id": 0, "strides": [1024, 1, 128, 16], "virtual": false}
{"dims": [32, 16, 3, 3], "dtype": "bfloat16", "id": 1, "strides": [144, 1, 48, 16], "virtual": false}
{"dims": [1, 32, 1, 1], "dtype": "bfloat16", "id": 2, "strides": [32, 1, 32, 32], "virtual": false}
{"dims": [2, 32, 8, 8], "dtype": "bfloat16", "id": 3, "strides": [2048, 1, 256, 32], "virtual": false}
{"dims": [2, 32, 8, 8], "dtype": "float", "id": 4, "strides": [2048, 1, 256, 32], "virtual": true}
{"dims": [2, 32, 8, 8], "dtype": "float", "id": 5, "strides": [2048, 1, 256, 32], "virtual": true}
{"dims": [2, 32, 8, 8], "dtype": "float", "id": 6, "strides": [2048, 1, 256, 32], "virtual": true}
{"dims": [2, 32, 8, 8], "dtype": "bfloat16", "id": 7, "strides": [2048, 1, 256, 32], "virtual": false}
{"attrs": {"dilation": [1, 1], "padding": [1, 1], "stride": [1, 1]}, "inputs": {"W": 1, "X": 0}, "op": "conv_fprop", "outputs": {"Y": 4}}
{"attrs": {"mode": "add"}, "inputs": {"IN_0": 4, "IN_1": 2}, "op": "pointwise", "outputs": {"OUT_0": 5}}
{"attrs": {"mode": "add"}, "inputs": {"IN_0": 5, "IN_1": 3}, "op": "pointwise", "outputs": {"OUT_0": 6}}
{"attrs": {"mode": "relu_fwd"}, "inputs": {"IN_0": 6}, "op": "pointwise", "outputs": {"OUT_0": 7}}""")

    def test_conv_scale_tanh_half(self) -> None:
        self.assertExpectedInline(golden("conv_scale_tanh_half"), """\
{"compute_dtype": "float", "inputs": [0, 1], "intermediate_dtype": "float", "io_dtype": "half", "outputs": [4], "version": 1}
{"dims": [2, 16, 8, 8], "dtype": "half", "id": 0, "strides": [1024, 1, 128, 16], "virtual": false}
{"dims": [32, 16, 3, 3], "dtype": "half", "id": 1, "strides": [144, 1, 48, 16], "virtual": false}
{"dims": [2, 32, 8, 8], "dtype": "float", "id": 2, "strides": [2048, 1, 256, 32], "virtual": true}
{"dims": [2, 32, 8, 8], "dtype": "float", "id": 3, "strides": [2048, 1, 256, 32], "virtual": true}
{"dims": [2, 32, 8, 8], "dtype": "half", "id": 4, "strides": [2048, 1, 256, 32], "virtual": false}
{"attrs": {"dilation": [1, 1], "padding": [1, 1], "stride": [1, 1]}, "inputs": {"W": 1, "X": 0}, "op": "conv_fprop", "outputs": {"Y": 2}}
{"attrs": {"mode": "mul", "scalar": 0.5}, "inputs": {"IN_0": 2}, "op": "pointwise", "outputs": {"OUT_0": 3}}
{"attrs": {"mode": "tanh_fwd"}, "inputs": {"IN_0": 3}, "op": "pointwise", "outputs": {"OUT_0": 4}}""")

    def test_conv_mul_channel_scale_sigmoid_bf16(self) -> None:
        self.assertExpectedInline(golden("conv_mul_channel_scale_sigmoid_bf16"), """\
{"compute_dtype": "float", "inputs": [0, 1, 2, 3], "intermediate_dtype": "float", "io_dtype": "bfloat16", "outputs": [7], "version": 1}
{"dims": [2, 16, 8, 8], "dtype": "bfloat16", "id": 0, "strides": [1024, 1, 128, 16], "virtual": false}
{"dims": [32, 16, 3, 3], "dtype": "bfloat16", "id": 1, "strides": [144, 1, 48, 16], "virtual": false}
{"dims": [1, 32, 1, 1], "dtype": "bfloat16", "id": 2, "strides": [32, 1, 32, 32], "virtual": false}
{"dims": [1, 32, 1, 1], "dtype": "bfloat16", "id": 3, "strides": [32, 1, 32, 32], "virtual": false}
{"dims": [2, 32, 8, 8], "dtype": "float", "id": 4, "strides": [2048, 1, 256, 32], "virtual": true}
{"dims": [2, 32, 8, 8], "dtype": "float", "id": 5, "strides": [2048, 1, 256, 32], "virtual": true}
{"dims": [2, 32, 8, 8], "dtype": "float", "id": 6, "strides": [2048, 1, 256, 32], "virtual": true}
{"dims": [2, 32, 8, 8], "dtype": "bfloat16", "id": 7, "strides": [2048, 1, 256, 32], "virtual": false}
{"attrs": {"dilation": [1, 1], "padding": [1, 1], "stride": [1, 1]}, "inputs": {"W": 1, "X": 0}, "op": "conv_fprop", "outputs": {"Y": 4}}
{"attrs": {"mode": "add"}, "inputs": {"IN_0": 4, "IN_1": 2}, "op": "pointwise", "outputs": {"OUT_0": 5}}
{"attrs": {"mode": "mul"}, "inputs": {"IN_0": 5, "IN_1": 3}, "op": "pointwise", "outputs": {"OUT_0": 6}}
{"attrs": {"mode": "sigmoid_fwd"}, "inputs": {"IN_0": 6}, "op": "pointwise", "outputs": {"OUT_0": 7}}""")

    def test_conv_gelu_none_half(self) -> None:
        self.assertExpectedInline(golden("conv_gelu_none_half"), """\
{"compute_dtype": "float", "inputs": [0, 1, 2], "intermediate_dtype": "float", "io_dtype": "half", "outputs": [5], "version": 1}
{"dims": [2, 16, 8, 8], "dtype": "half", "id": 0, "strides": [1024, 1, 128, 16], "virtual": false}
{"dims": [32, 16, 3, 3], "dtype": "half", "id": 1, "strides": [144, 1, 48, 16], "virtual": false}
{"dims": [1, 32, 1, 1], "dtype": "half", "id": 2, "strides": [32, 1, 32, 32], "virtual": false}
{"dims": [2, 32, 8, 8], "dtype": "float", "id": 3, "strides": [2048, 1, 256, 32], "virtual": true}
{"dims": [2, 32, 8, 8], "dtype": "float", "id": 4, "strides": [2048, 1, 256, 32], "virtual": true}
{"dims": [2, 32, 8, 8], "dtype": "half", "id": 5, "strides": [2048, 1, 256, 32], "virtual": false}
{"attrs": {"dilation": [1, 1], "padding": [1, 1], "stride": [1, 1]}, "inputs": {"W": 1, "X": 0}, "op": "conv_fprop", "outputs": {"Y": 3}}
{"attrs": {"mode": "add"}, "inputs": {"IN_0": 3, "IN_1": 2}, "op": "pointwise", "outputs": {"OUT_0": 4}}
{"attrs": {"mode": "gelu_fwd"}, "inputs": {"IN_0": 4}, "op": "pointwise", "outputs": {"OUT_0": 5}}""")

    def test_conv_gelu_tanh_half(self) -> None:
        self.assertExpectedInline(golden("conv_gelu_tanh_half"), """\
{"compute_dtype": "float", "inputs": [0, 1, 2], "intermediate_dtype": "float", "io_dtype": "half", "outputs": [5], "version": 1}
{"dims": [2, 16, 8, 8], "dtype": "half", "id": 0, "strides": [1024, 1, 128, 16], "virtual": false}
{"dims": [32, 16, 3, 3], "dtype": "half", "id": 1, "strides": [144, 1, 48, 16], "virtual": false}
{"dims": [1, 32, 1, 1], "dtype": "half", "id": 2, "strides": [32, 1, 32, 32], "virtual": false}
{"dims": [2, 32, 8, 8], "dtype": "float", "id": 3, "strides": [2048, 1, 256, 32], "virtual": true}
{"dims": [2, 32, 8, 8], "dtype": "float", "id": 4, "strides": [2048, 1, 256, 32], "virtual": true}
{"dims": [2, 32, 8, 8], "dtype": "half", "id": 5, "strides": [2048, 1, 256, 32], "virtual": false}
{"attrs": {"dilation": [1, 1], "padding": [1, 1], "stride": [1, 1]}, "inputs": {"W": 1, "X": 0}, "op": "conv_fprop", "outputs": {"Y": 3}}
{"attrs": {"mode": "add"}, "inputs": {"IN_0": 3, "IN_1": 2}, "op": "pointwise", "outputs": {"OUT_0": 4}}
{"attrs": {"mode": "gelu_approx_tanh_fwd"}, "inputs": {"IN_0": 4}, "op": "pointwise", "outputs": {"OUT_0": 5}}""")

    def test_conv_sigmoid_float(self) -> None:
        self.assertExpectedInline(golden("conv_sigmoid_float"), """\
{"compute_dtype": "float", "inputs": [0, 1, 2], "intermediate_dtype": "float", "io_dtype": "float", "outputs": [5], "version": 1}
{"dims": [2, 16, 8, 8], "dtype": "float", "id": 0, "strides": [1024, 64, 8, 1], "virtual": false}
{"dims": [32, 16, 3, 3], "dtype": "float", "id": 1, "strides": [144, 9, 3, 1], "virtual": false}
{"dims": [1, 32, 1, 1], "dtype": "float", "id": 2, "strides": [32, 1, 1, 1], "virtual": false}
{"dims": [2, 32, 8, 8], "dtype": "float", "id": 3, "strides": [2048, 64, 8, 1], "virtual": true}
{"dims": [2, 32, 8, 8], "dtype": "float", "id": 4, "strides": [2048, 64, 8, 1], "virtual": true}
{"dims": [2, 32, 8, 8], "dtype": "float", "id": 5, "strides": [2048, 64, 8, 1], "virtual": false}
{"attrs": {"dilation": [1, 1], "padding": [1, 1], "stride": [1, 1]}, "inputs": {"W": 1, "X": 0}, "op": "conv_fprop", "outputs": {"Y": 3}}
{"attrs": {"mode": "add"}, "inputs": {"IN_0": 3, "IN_1": 2}, "op": "pointwise", "outputs": {"OUT_0": 4}}
{"attrs": {"mode": "sigmoid_fwd"}, "inputs": {"IN_0": 4}, "op": "pointwise", "outputs": {"OUT_0": 5}}""")

    def test_conv_silu_half(self) -> None:
        self.assertExpectedInline(golden("conv_silu_half"), """\
{"compute_dtype": "float", "inputs": [0, 1, 2], "intermediate_dtype": "float", "io_dtype": "half", "outputs": [5], "version": 1}
{"dims": [2, 16, 8, 8], "dtype": "half", "id": 0, "strides": [1024, 1, 128, 16], "virtual": false}
{"dims": [32, 16, 3, 3], "dtype": "half", "id": 1, "strides": [144, 1, 48, 16], "virtual": false}
{"dims": [1, 32, 1, 1], "dtype": "half", "id": 2, "strides": [32, 1, 32, 32], "virtual": false}
{"dims": [2, 32, 8, 8], "dtype": "float", "id": 3, "strides": [2048, 1, 256, 32], "virtual": true}
{"dims": [2, 32, 8, 8], "dtype": "float", "id": 4, "strides": [2048, 1, 256, 32], "virtual": true}
{"dims": [2, 32, 8, 8], "dtype": "half", "id": 5, "strides": [2048, 1, 256, 32], "virtual": false}
{"attrs": {"dilation": [1, 1], "padding": [1, 1], "stride": [1, 1]}, "inputs": {"W": 1, "X": 0}, "op": "conv_fprop", "outputs": {"Y": 3}}
{"attrs": {"mode": "add"}, "inputs": {"IN_0": 3, "IN_1": 2}, "op": "pointwise", "outputs": {"OUT_0": 4}}
{"attrs": {"mode": "swish_fwd"}, "inputs": {"IN_0": 4}, "op": "pointwise", "outputs": {"OUT_0": 5}}""")

    def test_conv_swish_diamond_half(self) -> None:
        self.assertExpectedInline(golden("conv_swish_diamond_half"), """\
{"compute_dtype": "float", "inputs": [0, 1, 2], "intermediate_dtype": "float", "io_dtype": "half", "outputs": [6], "version": 1}
{"dims": [2, 16, 8, 8], "dtype": "half", "id": 0, "strides": [1024, 1, 128, 16], "virtual": false}
{"dims": [32, 16, 3, 3], "dtype": "half", "id": 1, "strides": [144, 1, 48, 16], "virtual": false}
{"dims": [1, 32, 1, 1], "dtype": "half", "id": 2, "strides": [32, 1, 32, 32], "virtual": false}
{"dims": [2, 32, 8, 8], "dtype": "float", "id": 3, "strides": [2048, 1, 256, 32], "virtual": true}
{"dims": [2, 32, 8, 8], "dtype": "float", "id": 4, "strides": [2048, 1, 256, 32], "virtual": true}
{"dims": [2, 32, 8, 8], "dtype": "float", "id": 5, "strides": [2048, 1, 256, 32], "virtual": true}
{"dims": [2, 32, 8, 8], "dtype": "half", "id": 6, "strides": [2048, 1, 256, 32], "virtual": false}
{"attrs": {"dilation": [1, 1], "padding": [1, 1], "stride": [1, 1]}, "inputs": {"W": 1, "X": 0}, "op": "conv_fprop", "outputs": {"Y": 3}}
{"attrs": {"mode": "add"}, "inputs": {"IN_0": 3, "IN_1": 2}, "op": "pointwise", "outputs": {"OUT_0": 4}}
{"attrs": {"mode": "sigmoid_fwd"}, "inputs": {"IN_0": 4}, "op": "pointwise", "outputs": {"OUT_0": 5}}
{"attrs": {"mode": "mul"}, "inputs": {"IN_0": 4, "IN_1": 5}, "op": "pointwise", "outputs": {"OUT_0": 6}}""")

    def test_conv_relu6_half(self) -> None:
        self.assertExpectedInline(golden("conv_relu6_half"), """\
{"compute_dtype": "float", "inputs": [0, 1, 2], "intermediate_dtype": "float", "io_dtype": "half", "outputs": [6], "version": 1}
{"dims": [2, 16, 8, 8], "dtype": "half", "id": 0, "strides": [1024, 1, 128, 16], "virtual": false}
{"dims": [32, 16, 3, 3], "dtype": "half", "id": 1, "strides": [144, 1, 48, 16], "virtual": false}
{"dims": [1, 32, 1, 1], "dtype": "half", "id": 2, "strides": [32, 1, 32, 32], "virtual": false}
{"dims": [2, 32, 8, 8], "dtype": "float", "id": 3, "strides": [2048, 1, 256, 32], "virtual": true}
{"dims": [2, 32, 8, 8], "dtype": "float", "id": 4, "strides": [2048, 1, 256, 32], "virtual": true}
{"dims": [2, 32, 8, 8], "dtype": "float", "id": 5, "strides": [2048, 1, 256, 32], "virtual": true}
{"dims": [2, 32, 8, 8], "dtype": "half", "id": 6, "strides": [2048, 1, 256, 32], "virtual": false}
{"attrs": {"dilation": [1, 1], "padding": [1, 1], "stride": [1, 1]}, "inputs": {"W": 1, "X": 0}, "op": "conv_fprop", "outputs": {"Y": 3}}
{"attrs": {"mode": "add"}, "inputs": {"IN_0": 3, "IN_1": 2}, "op": "pointwise", "outputs": {"OUT_0": 4}}
{"attrs": {"mode": "max", "scalar": 0.0}, "inputs": {"IN_0": 4}, "op": "pointwise", "outputs": {"OUT_0": 5}}
{"attrs": {"mode": "min", "scalar": 6.0}, "inputs": {"IN_0": 5}, "op": "pointwise", "outputs": {"OUT_0": 6}}""")

    def test_conv_clamp_bf16(self) -> None:
        self.assertExpectedInline(golden("conv_clamp_bf16"), """\
{"compute_dtype": "float", "inputs": [0, 1, 2], "intermediate_dtype": "float", "io_dtype": "bfloat16", "outputs": [6], "version": 1}
{"dims": [2, 16, 8, 8], "dtype": "bfloat16", "id": 0, "strides": [1024, 1, 128, 16], "virtual": false}
{"dims": [32, 16, 3, 3], "dtype": "bfloat16", "id": 1, "strides": [144, 1, 48, 16], "virtual": false}
{"dims": [1, 32, 1, 1], "dtype": "bfloat16", "id": 2, "strides": [32, 1, 32, 32], "virtual": false}
{"dims": [2, 32, 8, 8], "dtype": "float", "id": 3, "strides": [2048, 1, 256, 32], "virtual": true}
{"dims": [2, 32, 8, 8], "dtype": "float", "id": 4, "strides": [2048, 1, 256, 32], "virtual": true}
{"dims": [2, 32, 8, 8], "dtype": "float", "id": 5, "strides": [2048, 1, 256, 32], "virtual": true}
{"dims": [2, 32, 8, 8], "dtype": "bfloat16", "id": 6, "strides": [2048, 1, 256, 32], "virtual": false}
{"attrs": {"dilation": [1, 1], "padding": [1, 1], "stride": [1, 1]}, "inputs": {"W": 1, "X": 0}, "op": "conv_fprop", "outputs": {"Y": 3}}
{"attrs": {"mode": "add"}, "inputs": {"IN_0": 3, "IN_1": 2}, "op": "pointwise", "outputs": {"OUT_0": 4}}
{"attrs": {"mode": "max", "scalar": -1.0}, "inputs": {"IN_0": 4}, "op": "pointwise", "outputs": {"OUT_0": 5}}
{"attrs": {"mode": "min", "scalar": 1.5}, "inputs": {"IN_0": 5}, "op": "pointwise", "outputs": {"OUT_0": 6}}""")

    def test_conv_relu_channel_sum_half(self) -> None:
        self.assertExpectedInline(golden("conv_relu_channel_sum_half"), """\
{"compute_dtype": "float", "inputs": [0, 1, 2], "intermediate_dtype": "float", "io_dtype": "half", "outputs": [6], "version": 1}
{"dims": [2, 16, 8, 8], "dtype": "half", "id": 0, "strides": [1024, 64, 8, 1], "virtual": false}
{"dims": [32, 16, 3, 3], "dtype": "half", "id": 1, "strides": [144, 9, 3, 1], "virtual": false}
{"dims": [1, 32, 1, 1], "dtype": "half", "id": 2, "strides": [32, 1, 1, 1], "virtual": false}
{"dims": [2, 32, 8, 8], "dtype": "float", "id": 3, "strides": [2048, 64, 8, 1], "virtual": true}
{"dims": [2, 32, 8, 8], "dtype": "float", "id": 4, "strides": [2048, 64, 8, 1], "virtual": true}
{"dims": [2, 32, 8, 8], "dtype": "float", "id": 5, "strides": [2048, 64, 8, 1], "virtual": true}
{"dims": [2, 1, 8, 8], "dtype": "float", "id": 6, "strides": [64, 64, 8, 1], "virtual": false}
{"attrs": {"dilation": [1, 1], "padding": [1, 1], "stride": [1, 1]}, "inputs": {"W": 1, "X": 0}, "op": "conv_fprop", "outputs": {"Y": 3}}
{"attrs": {"mode": "add"}, "inputs": {"IN_0": 3, "IN_1": 2}, "op": "pointwise", "outputs": {"OUT_0": 4}}
{"attrs": {"mode": "relu_fwd"}, "inputs": {"IN_0": 4}, "op": "pointwise", "outputs": {"OUT_0": 5}}
{"attrs": {"mode": "add"}, "inputs": {"X": 5}, "op": "reduction", "outputs": {"Y": 6}}""")

    def test_conv_channel_mean_float(self) -> None:
        self.assertExpectedInline(golden("conv_channel_mean_float"), """\
{"compute_dtype": "float", "inputs": [0, 1, 2], "intermediate_dtype": "float", "io_dtype": "float", "outputs": [6], "version": 1}
{"dims": [2, 16, 8, 8], "dtype": "float", "id": 0, "strides": [1024, 64, 8, 1], "virtual": false}
{"dims": [32, 16, 3, 3], "dtype": "float", "id": 1, "strides": [144, 9, 3, 1], "virtual": false}
{"dims": [1, 32, 1, 1], "dtype": "float", "id": 2, "strides": [32, 1, 1, 1], "virtual": false}
{"dims": [2, 32, 8, 8], "dtype": "float", "id": 3, "strides": [2048, 64, 8, 1], "virtual": true}
{"dims": [2, 32, 8, 8], "dtype": "float", "id": 4, "strides": [2048, 64, 8, 1], "virtual": true}
{"dims": [2, 32, 8, 8], "dtype": "float", "id": 5, "strides": [2048, 64, 8, 1], "virtual": true}
{"dims": [2, 1, 8, 8], "dtype": "float", "id": 6, "strides": [64, 64, 8, 1], "virtual": false}
{"attrs": {"dilation": [1, 1], "padding": [1, 1], "stride": [1, 1]}, "inputs": {"W": 1, "X": 0}, "op": "conv_fprop", "outputs": {"Y": 3}}
{"attrs": {"mode": "add"}, "inputs": {"IN_0": 3, "IN_1": 2}, "op": "pointwise", "outputs": {"OUT_0": 4}}
{"attrs": {"mode": "mul", "scalar": 0.03125}, "inputs": {"IN_0": 4}, "op": "pointwise", "outputs": {"OUT_0": 5}}
{"attrs": {"mode": "add"}, "inputs": {"X": 5}, "op": "reduction", "outputs": {"Y": 6}}""")

    def test_conv_channel_max_channels_last_half(self) -> None:
        self.assertExpectedInline(golden("conv_channel_max_channels_last_half"), """\
{"compute_dtype": "float", "inputs": [0, 1, 2], "intermediate_dtype": "float", "io_dtype": "half", "outputs": [5], "version": 1}
{"dims": [2, 16, 8, 8], "dtype": "half", "id": 0, "strides": [1024, 1, 128, 16], "virtual": false}
{"dims": [32, 16, 3, 3], "dtype": "half", "id": 1, "strides": [144, 1, 48, 16], "virtual": false}
{"dims": [1, 32, 1, 1], "dtype": "half", "id": 2, "strides": [32, 1, 32, 32], "virtual": false}
{"dims": [2, 32, 8, 8], "dtype": "float", "id": 3, "strides": [2048, 1, 256, 32], "virtual": true}
{"dims": [2, 32, 8, 8], "dtype": "float", "id": 4, "strides": [2048, 1, 256, 32], "virtual": true}
{"dims": [2, 1, 8, 8], "dtype": "float", "id": 5, "strides": [64, 1, 8, 1], "virtual": false}
{"attrs": {"dilation": [1, 1], "padding": [1, 1], "stride": [1, 1]}, "inputs": {"W": 1, "X": 0}, "op": "conv_fprop", "outputs": {"Y": 3}}
{"attrs": {"mode": "add"}, "inputs": {"IN_0": 3, "IN_1": 2}, "op": "pointwise", "outputs": {"OUT_0": 4}}
{"attrs": {"mode": "max"}, "inputs": {"X": 4}, "op": "reduction", "outputs": {"Y": 5}}""")

    def test_conv_per_channel_sum_bf16(self) -> None:
        self.assertExpectedInline(golden("conv_per_channel_sum_bf16"), """\
{"compute_dtype": "float", "inputs": [0, 1, 2], "intermediate_dtype": "float", "io_dtype": "bfloat16", "outputs": [5], "version": 1}
{"dims": [2, 16, 8, 8], "dtype": "bfloat16", "id": 0, "strides": [1024, 64, 8, 1], "virtual": false}
{"dims": [32, 16, 3, 3], "dtype": "bfloat16", "id": 1, "strides": [144, 9, 3, 1], "virtual": false}
{"dims": [1, 32, 1, 1], "dtype": "bfloat16", "id": 2, "strides": [32, 1, 1, 1], "virtual": false}
{"dims": [2, 32, 8, 8], "dtype": "float", "id": 3, "strides": [2048, 64, 8, 1], "virtual": true}
{"dims": [2, 32, 8, 8], "dtype": "float", "id": 4, "strides": [2048, 64, 8, 1], "virtual": true}
{"dims": [1, 32, 1, 1], "dtype": "float", "id": 5, "strides": [32, 1, 1, 1], "virtual": false}
{"attrs": {"dilation": [1, 1], "padding": [1, 1], "stride": [1, 1]}, "inputs": {"W": 1, "X": 0}, "op": "conv_fprop", "outputs": {"Y": 3}}
{"attrs": {"mode": "add"}, "inputs": {"IN_0": 3, "IN_1": 2}, "op": "pointwise", "outputs": {"OUT_0": 4}}
{"attrs": {"mode": "add"}, "inputs": {"X": 4}, "op": "reduction", "outputs": {"Y": 5}}""")

    def test_bn_relu_prologue_conv_relu_half(self) -> None:
        self.assertExpectedInline(golden("bn_relu_prologue_conv_relu_half"), """\
{"compute_dtype": "float", "inputs": [0, 1, 2, 3, 4], "intermediate_dtype": "half", "io_dtype": "half", "outputs": [10], "version": 1}
{"dims": [2, 16, 8, 8], "dtype": "half", "id": 0, "strides": [1024, 1, 128, 16], "virtual": false}
{"dims": [1, 16, 1, 1], "dtype": "half", "id": 1, "strides": [16, 1, 16, 16], "virtual": false}
{"dims": [1, 16, 1, 1], "dtype": "half", "id": 2, "strides": [16, 1, 16, 16], "virtual": false}
{"dims": [32, 16, 3, 3], "dtype": "half", "id": 3, "strides": [144, 1, 48, 16], "virtual": false}
{"dims": [1, 32, 1, 1], "dtype": "half", "id": 4, "strides": [32, 1, 32, 32], "virtual": false}
{"dims": [2, 16, 8, 8], "dtype": "half", "id": 5, "strides": [1024, 1, 128, 16], "virtual": true}
{"dims": [2, 16, 8, 8], "dtype": "half", "id": 6, "strides": [1024, 1, 128, 16], "virtual": true}
{"dims": [2, 16, 8, 8], "dtype": "half", "id": 7, "strides": [1024, 1, 128, 16], "virtual": true}
{"dims": [2, 32, 8, 8], "dtype": "half", "id": 8, "strides": [2048, 1, 256, 32], "virtual": true}
{"dims": [2, 32, 8, 8], "dtype": "half", "id": 9, "strides": [2048, 1, 256, 32], "virtual": true}
{"dims": [2, 32, 8, 8], "dtype": "half", "id": 10, "strides": [2048, 1, 256, 32], "virtual": false}
{"attrs": {"mode": "mul"}, "inputs": {"IN_0": 0, "IN_1": 1}, "op": "pointwise", "outputs": {"OUT_0": 5}}
{"attrs": {"mode": "add"}, "inputs": {"IN_0": 5, "IN_1": 2}, "op": "pointwise", "outputs": {"OUT_0": 6}}
{"attrs": {"mode": "relu_fwd"}, "inputs": {"IN_0": 6}, "op": "pointwise", "outputs": {"OUT_0": 7}}
{"attrs": {"dilation": [1, 1], "padding": [1, 1], "stride": [1, 1]}, "inputs": {"W": 3, "X": 7}, "op": "conv_fprop", "outputs": {"Y": 8}}
{"attrs": {"mode": "add"}, "inputs": {"IN_0": 8, "IN_1": 4}, "op": "pointwise", "outputs": {"OUT_0": 9}}
{"attrs": {"mode": "relu_fwd"}, "inputs": {"IN_0": 9}, "op": "pointwise", "outputs": {"OUT_0": 10}}""")

    def test_bn_relu_prologue_conv_channels_last_bf16(self) -> None:
        self.assertExpectedInline(golden("bn_relu_prologue_conv_channels_last_bf16"), """\
{"compute_dtype": "float", "inputs": [0, 1, 2, 3, 4], "intermediate_dtype": "bfloat16", "io_dtype": "bfloat16", "outputs": [9], "version": 1}
{"dims": [2, 16, 8, 8], "dtype": "bfloat16", "id": 0, "strides": [1024, 1, 128, 16], "virtual": false}
{"dims": [1, 16, 1, 1], "dtype": "bfloat16", "id": 1, "strides": [16, 1, 16, 16], "virtual": false}
{"dims": [1, 16, 1, 1], "dtype": "bfloat16", "id": 2, "strides": [16, 1, 16, 16], "virtual": false}
{"dims": [32, 16, 3, 3], "dtype": "bfloat16", "id": 3, "strides": [144, 1, 48, 16], "virtual": false}
{"dims": [1, 32, 1, 1], "dtype": "bfloat16", "id": 4, "strides": [32, 1, 32, 32], "virtual": false}
{"dims": [2, 16, 8, 8], "dtype": "bfloat16", "id": 5, "strides": [1024, 1, 128, 16], "virtual": true}
{"dims": [2, 16, 8, 8], "dtype": "bfloat16", "id": 6, "strides": [1024, 1, 128, 16], "virtual": true}
{"dims": [2, 16, 8, 8], "dtype": "bfloat16", "id": 7, "strides": [1024, 1, 128, 16], "virtual": true}
{"dims": [2, 32, 8, 8], "dtype": "bfloat16", "id": 8, "strides": [2048, 1, 256, 32], "virtual": true}
{"dims": [2, 32, 8, 8], "dtype": "bfloat16", "id": 9, "strides": [2048, 1, 256, 32], "virtual": false}
{"attrs": {"mode": "mul"}, "inputs": {"IN_0": 0, "IN_1": 1}, "op": "pointwise", "outputs": {"OUT_0": 5}}
{"attrs": {"mode": "add"}, "inputs": {"IN_0": 5, "IN_1": 2}, "op": "pointwise", "outputs": {"OUT_0": 6}}
{"attrs": {"mode": "relu_fwd"}, "inputs": {"IN_0": 6}, "op": "pointwise", "outputs": {"OUT_0": 7}}
{"attrs": {"dilation": [1, 1], "padding": [1, 1], "stride": [1, 1]}, "inputs": {"W": 3, "X": 7}, "op": "conv_fprop", "outputs": {"Y": 8}}
{"attrs": {"mode": "add"}, "inputs": {"IN_0": 8, "IN_1": 4}, "op": "pointwise", "outputs": {"OUT_0": 9}}""")

    def test_nchw_conv_relu_scale_channel_sum_half(self) -> None:
        self.assertExpectedInline(golden("nchw_conv_relu_scale_channel_sum_half"), """\
{"compute_dtype": "float", "inputs": [0, 1, 2, 3], "intermediate_dtype": "float", "io_dtype": "half", "outputs": [8], "version": 1}
{"dims": [2, 16, 8, 8], "dtype": "half", "id": 0, "strides": [1024, 64, 8, 1], "virtual": false}
{"dims": [32, 16, 3, 3], "dtype": "half", "id": 1, "strides": [144, 9, 3, 1], "virtual": false}
{"dims": [1, 32, 1, 1], "dtype": "half", "id": 2, "strides": [32, 1, 1, 1], "virtual": false}
{"dims": [1, 32, 1, 1], "dtype": "half", "id": 3, "strides": [32, 1, 1, 1], "virtual": false}
{"dims": [2, 32, 8, 8], "dtype": "float", "id": 4, "strides": [2048, 64, 8, 1], "virtual": true}
{"dims": [2, 32, 8, 8], "dtype": "float", "id": 5, "strides": [2048, 64, 8, 1], "virtual": true}
{"dims": [2, 32, 8, 8], "dtype": "float", "id": 6, "strides": [2048, 64, 8, 1], "virtual": true}
{"dims": [2, 32, 8, 8], "dtype": "float", "id": 7, "strides": [2048, 64, 8, 1], "virtual": true}
{"dims": [2, 1, 8, 8], "dtype": "float", "id": 8, "strides": [64, 64, 8, 1], "virtual": false}
{"attrs": {"dilation": [1, 1], "padding": [1, 1], "stride": [1, 1]}, "inputs": {"W": 1, "X": 0}, "op": "conv_fprop", "outputs": {"Y": 4}}
{"attrs": {"mode": "add"}, "inputs": {"IN_0": 4, "IN_1": 2}, "op": "pointwise", "outputs": {"OUT_0": 5}}
{"attrs": {"mode": "relu_fwd"}, "inputs": {"IN_0": 5}, "op": "pointwise", "outputs": {"OUT_0": 6}}
{"attrs": {"mode": "mul"}, "inputs": {"IN_0": 6, "IN_1": 3}, "op": "pointwise", "outputs": {"OUT_0": 7}}
{"attrs": {"mode": "add"}, "inputs": {"X": 7}, "op": "reduction", "outputs": {"Y": 8}}""")

    def test_nchw_conv_swish_channel_max_bf16(self) -> None:
        self.assertExpectedInline(golden("nchw_conv_swish_channel_max_bf16"), """\
{"compute_dtype": "float", "inputs": [0, 1, 2], "intermediate_dtype": "float", "io_dtype": "bfloat16", "outputs": [7], "version": 1}
{"dims": [2, 16, 8, 8], "dtype": "bfloat16", "id": 0, "strides": [1024, 64, 8, 1], "virtual": false}
{"dims": [32, 16, 3, 3], "dtype": "bfloat16", "id": 1, "strides": [144, 9, 3, 1], "virtual": false}
{"dims": [1, 32, 1, 1], "dtype": "bfloat16", "id": 2, "strides": [32, 1, 1, 1], "virtual": false}
{"dims": [2, 32, 8, 8], "dtype": "float", "id": 3, "strides": [2048, 64, 8, 1], "virtual": true}
{"dims": [2, 32, 8, 8], "dtype": "float", "id": 4, "strides": [2048, 64, 8, 1], "virtual": true}
{"dims": [2, 32, 8, 8], "dtype": "float", "id": 5, "strides": [2048, 64, 8, 1], "virtual": true}
{"dims": [2, 32, 8, 8], "dtype": "float", "id": 6, "strides": [2048, 64, 8, 1], "virtual": true}
{"dims": [2, 1, 8, 8], "dtype": "float", "id": 7, "strides": [64, 64, 8, 1], "virtual": false}
{"attrs": {"dilation": [1, 1], "padding": [1, 1], "stride": [1, 1]}, "inputs": {"W": 1, "X": 0}, "op": "conv_fprop", "outputs": {"Y": 3}}
{"attrs": {"mode": "add"}, "inputs": {"IN_0": 3, "IN_1": 2}, "op": "pointwise", "outputs": {"OUT_0": 4}}
{"attrs": {"mode": "sigmoid_fwd"}, "inputs": {"IN_0": 4}, "op": "pointwise", "outputs": {"OUT_0": 5}}
{"attrs": {"mode": "mul"}, "inputs": {"IN_0": 4, "IN_1": 5}, "op": "pointwise", "outputs": {"OUT_0": 6}}
{"attrs": {"mode": "max"}, "inputs": {"X": 6}, "op": "reduction", "outputs": {"Y": 7}}""")
