"""Golden IR of the catalog's groups with a matmul anchor (matmul_patterns.py); how
to read and regenerate it: test_cudnn_golden_ir_conv.py."""
# ruff: noqa: E501  (a golden line is one JSON object, as long as it is)

from __future__ import annotations

import expecttest
from golden_ir import golden


class TestMatmulGoldenIR(expecttest.TestCase):
    def test_linear_bias_gelu_half(self) -> None:
        self.assertExpectedInline(golden("linear_bias_gelu_half"), """\
{"compute_dtype": "float", "inputs": [0, 1, 2], "intermediate_dtype": "float", "io_dtype": "half", "outputs": [5], "version": 1}
{"dims": [1, 8, 64], "dtype": "half", "id": 0, "strides": [512, 64, 1], "virtual": false}
{"dims": [1, 64, 32], "dtype": "half", "id": 1, "strides": [2048, 1, 64], "virtual": false}
{"dims": [1, 1, 32], "dtype": "half", "id": 2, "strides": [32, 32, 1], "virtual": false}
{"dims": [1, 8, 32], "dtype": "float", "id": 3, "strides": [256, 32, 1], "virtual": true}
{"dims": [1, 8, 32], "dtype": "float", "id": 4, "strides": [256, 32, 1], "virtual": true}
{"dims": [1, 8, 32], "dtype": "half", "id": 5, "strides": [256, 32, 1], "virtual": false}
{"attrs": {}, "inputs": {"A": 0, "B": 1}, "op": "matmul", "outputs": {"C": 3}}
{"attrs": {"mode": "add"}, "inputs": {"IN_0": 3, "IN_1": 2}, "op": "pointwise", "outputs": {"OUT_0": 4}}
{"attrs": {"mode": "gelu_fwd"}, "inputs": {"IN_0": 4}, "op": "pointwise", "outputs": {"OUT_0": 5}}""")

    def test_linear_3d_gelu_tanh_bf16(self) -> None:
        self.assertExpectedInline(golden("linear_3d_gelu_tanh_bf16"), """\
{"compute_dtype": "float", "inputs": [0, 1, 2], "intermediate_dtype": "float", "io_dtype": "bfloat16", "outputs": [5], "version": 1}
{"dims": [2, 8, 64], "dtype": "bfloat16", "id": 0, "strides": [512, 64, 1], "virtual": false}
{"dims": [1, 64, 32], "dtype": "bfloat16", "id": 1, "strides": [2048, 1, 64], "virtual": false}
{"dims": [1, 1, 32], "dtype": "bfloat16", "id": 2, "strides": [32, 32, 1], "virtual": false}
{"dims": [2, 8, 32], "dtype": "float", "id": 3, "strides": [256, 32, 1], "virtual": true}
{"dims": [2, 8, 32], "dtype": "float", "id": 4, "strides": [256, 32, 1], "virtual": true}
{"dims": [2, 8, 32], "dtype": "bfloat16", "id": 5, "strides": [256, 32, 1], "virtual": false}
{"attrs": {}, "inputs": {"A": 0, "B": 1}, "op": "matmul", "outputs": {"C": 3}}
{"attrs": {"mode": "add"}, "inputs": {"IN_0": 3, "IN_1": 2}, "op": "pointwise", "outputs": {"OUT_0": 4}}
{"attrs": {"mode": "gelu_approx_tanh_fwd"}, "inputs": {"IN_0": 4}, "op": "pointwise", "outputs": {"OUT_0": 5}}""")

    def test_linear_3d_residual_add_bf16(self) -> None:
        self.assertExpectedInline(golden("linear_3d_residual_add_bf16"), """\
{"compute_dtype": "float", "inputs": [0, 1, 2, 3], "intermediate_dtype": "float", "io_dtype": "bfloat16", "outputs": [6], "version": 1}
{"dims": [2, 8, 64], "dtype": "bfloat16", "id": 0, "strides": [512, 64, 1], "virtual": false}
{"dims": [1, 64, 32], "dtype": "bfloat16", "id": 1, "strides": [2048, 1, 64], "virtual": false}
{"dims": [1, 1, 32], "dtype": "bfloat16", "id": 2, "strides": [32, 32, 1], "virtual": false}
{"dims": [2, 8, 32], "dtype": "bfloat16", "id": 3, "strides": [256, 32, 1], "virtual": false}
{"dims": [2, 8, 32], "dtype": "float", "id": 4, "strides": [256, 32, 1], "virtual": true}
{"dims": [2, 8, 32], "dtype": "float", "id": 5, "strides": [256, 32, 1], "virtual": true}
{"dims": [2, 8, 32], "dtype": "bfloat16", "id": 6, "strides": [256, 32, 1], "virtual": false}
{"attrs": {}, "inputs": {"A": 0, "B": 1}, "op": "matmul", "outputs": {"C": 4}}
{"attrs": {"mode": "add"}, "inputs": {"IN_0": 4, "IN_1": 2}, "op": "pointwise", "outputs": {"OUT_0": 5}}
{"attrs": {"mode": "add"}, "inputs": {"IN_0": 5, "IN_1": 3}, "op": "pointwise", "outputs": {"OUT_0": 6}}""")

    def test_matmul_tanh_float(self) -> None:
        self.assertExpectedInline(golden("matmul_tanh_float"), """\
{"compute_dtype": "float", "inputs": [0, 1], "intermediate_dtype": "float", "io_dtype": "float", "outputs": [3], "version": 1}
{"dims": [1, 8, 64], "dtype": "float", "id": 0, "strides": [512, 64, 1], "virtual": false}
{"dims": [1, 64, 32], "dtype": "float", "id": 1, "strides": [2048, 32, 1], "virtual": false}
{"dims": [1, 8, 32], "dtype": "float", "id": 2, "strides": [256, 32, 1], "virtual": true}
{"dims": [1, 8, 32], "dtype": "float", "id": 3, "strides": [256, 32, 1], "virtual": false}
{"attrs": {}, "inputs": {"A": 0, "B": 1}, "op": "matmul", "outputs": {"C": 2}}
{"attrs": {"mode": "tanh_fwd"}, "inputs": {"IN_0": 2}, "op": "pointwise", "outputs": {"OUT_0": 3}}""")

    def test_bmm_scale_mask_half(self) -> None:
        self.assertExpectedInline(golden("bmm_scale_mask_half"), """\
{"compute_dtype": "float", "inputs": [0, 1, 2], "intermediate_dtype": "float", "io_dtype": "half", "outputs": [5], "version": 1}
{"dims": [2, 8, 64], "dtype": "half", "id": 0, "strides": [512, 64, 1], "virtual": false}
{"dims": [2, 64, 16], "dtype": "half", "id": 1, "strides": [1024, 16, 1], "virtual": false}
{"dims": [2, 1, 16], "dtype": "half", "id": 2, "strides": [16, 16, 1], "virtual": false}
{"dims": [2, 8, 16], "dtype": "float", "id": 3, "strides": [128, 16, 1], "virtual": true}
{"dims": [2, 8, 16], "dtype": "float", "id": 4, "strides": [128, 16, 1], "virtual": true}
{"dims": [2, 8, 16], "dtype": "half", "id": 5, "strides": [128, 16, 1], "virtual": false}
{"attrs": {}, "inputs": {"A": 0, "B": 1}, "op": "matmul", "outputs": {"C": 3}}
{"attrs": {"mode": "div", "scalar": 8.0}, "inputs": {"IN_0": 3}, "op": "pointwise", "outputs": {"OUT_0": 4}}
{"attrs": {"mode": "add"}, "inputs": {"IN_0": 4, "IN_1": 2}, "op": "pointwise", "outputs": {"OUT_0": 5}}""")

    def test_addmm_relu_half(self) -> None:
        self.assertExpectedInline(golden("addmm_relu_half"), """\
{"compute_dtype": "float", "inputs": [0, 1, 2], "intermediate_dtype": "float", "io_dtype": "half", "outputs": [5], "version": 1}
{"dims": [1, 1, 32], "dtype": "half", "id": 0, "strides": [32, 32, 1], "virtual": false}
{"dims": [1, 8, 64], "dtype": "half", "id": 1, "strides": [512, 64, 1], "virtual": false}
{"dims": [1, 64, 32], "dtype": "half", "id": 2, "strides": [2048, 32, 1], "virtual": false}
{"dims": [1, 8, 32], "dtype": "float", "id": 3, "strides": [256, 32, 1], "virtual": true}
{"dims": [1, 8, 32], "dtype": "float", "id": 4, "strides": [256, 32, 1], "virtual": true}
{"dims": [1, 8, 32], "dtype": "half", "id": 5, "strides": [256, 32, 1], "virtual": false}
{"attrs": {}, "inputs": {"A": 1, "B": 2}, "op": "matmul", "outputs": {"C": 3}}
{"attrs": {"mode": "add"}, "inputs": {"IN_0": 3, "IN_1": 0}, "op": "pointwise", "outputs": {"OUT_0": 4}}
{"attrs": {"mode": "relu_fwd"}, "inputs": {"IN_0": 4}, "op": "pointwise", "outputs": {"OUT_0": 5}}""")

    def test_mm_sub_clamp_min_float(self) -> None:
        self.assertExpectedInline(golden("mm_sub_clamp_min_float"), """\
{"compute_dtype": "float", "inputs": [0, 1, 2], "intermediate_dtype": "float", "io_dtype": "float", "outputs": [5], "version": 1}
{"dims": [1, 8, 64], "dtype": "float", "id": 0, "strides": [512, 64, 1], "virtual": false}
{"dims": [1, 64, 32], "dtype": "float", "id": 1, "strides": [2048, 32, 1], "virtual": false}
{"dims": [1, 8, 32], "dtype": "float", "id": 2, "strides": [256, 32, 1], "virtual": false}
{"dims": [1, 8, 32], "dtype": "float", "id": 3, "strides": [256, 32, 1], "virtual": true}
{"dims": [1, 8, 32], "dtype": "float", "id": 4, "strides": [256, 32, 1], "virtual": true}
{"dims": [1, 8, 32], "dtype": "float", "id": 5, "strides": [256, 32, 1], "virtual": false}
{"attrs": {}, "inputs": {"A": 0, "B": 1}, "op": "matmul", "outputs": {"C": 3}}
{"attrs": {"mode": "sub"}, "inputs": {"IN_0": 3, "IN_1": 2}, "op": "pointwise", "outputs": {"OUT_0": 4}}
{"attrs": {"mode": "max", "scalar": 0.25}, "inputs": {"IN_0": 4}, "op": "pointwise", "outputs": {"OUT_0": 5}}""")

    def test_linear_silu_bf16(self) -> None:
        self.assertExpectedInline(golden("linear_silu_bf16"), """\
{"compute_dtype": "float", "inputs": [0, 1, 2], "intermediate_dtype": "float", "io_dtype": "bfloat16", "outputs": [5], "version": 1}
{"dims": [1, 8, 64], "dtype": "bfloat16", "id": 0, "strides": [512, 64, 1], "virtual": false}
{"dims": [1, 64, 32], "dtype": "bfloat16", "id": 1, "strides": [2048, 1, 64], "virtual": false}
{"dims": [1, 1, 32], "dtype": "bfloat16", "id": 2, "strides": [32, 32, 1], "virtual": false}
{"dims": [1, 8, 32], "dtype": "float", "id": 3, "strides": [256, 32, 1], "virtual": true}
{"dims": [1, 8, 32], "dtype": "float", "id": 4, "strides": [256, 32, 1], "virtual": true}
{"dims": [1, 8, 32], "dtype": "bfloat16", "id": 5, "strides": [256, 32, 1], "virtual": false}
{"attrs": {}, "inputs": {"A": 0, "B": 1}, "op": "matmul", "outputs": {"C": 3}}
{"attrs": {"mode": "add"}, "inputs": {"IN_0": 3, "IN_1": 2}, "op": "pointwise", "outputs": {"OUT_0": 4}}
{"attrs": {"mode": "swish_fwd"}, "inputs": {"IN_0": 4}, "op": "pointwise", "outputs": {"OUT_0": 5}}""")

    def test_linear_relu_row_sum_half(self) -> None:
        self.assertExpectedInline(golden("linear_relu_row_sum_half"), """\
{"compute_dtype": "float", "inputs": [0, 1, 2], "intermediate_dtype": "float", "io_dtype": "half", "outputs": [6], "version": 1}
{"dims": [1, 8, 64], "dtype": "half", "id": 0, "strides": [512, 64, 1], "virtual": false}
{"dims": [1, 64, 32], "dtype": "half", "id": 1, "strides": [2048, 1, 64], "virtual": false}
{"dims": [1, 1, 32], "dtype": "half", "id": 2, "strides": [32, 32, 1], "virtual": false}
{"dims": [1, 8, 32], "dtype": "float", "id": 3, "strides": [256, 32, 1], "virtual": true}
{"dims": [1, 8, 32], "dtype": "float", "id": 4, "strides": [256, 32, 1], "virtual": true}
{"dims": [1, 8, 32], "dtype": "float", "id": 5, "strides": [256, 32, 1], "virtual": true}
{"dims": [1, 8, 1], "dtype": "float", "id": 6, "strides": [8, 1, 1], "virtual": false}
{"attrs": {}, "inputs": {"A": 0, "B": 1}, "op": "matmul", "outputs": {"C": 3}}
{"attrs": {"mode": "add"}, "inputs": {"IN_0": 3, "IN_1": 2}, "op": "pointwise", "outputs": {"OUT_0": 4}}
{"attrs": {"mode": "relu_fwd"}, "inputs": {"IN_0": 4}, "op": "pointwise", "outputs": {"OUT_0": 5}}
{"attrs": {"mode": "add"}, "inputs": {"X": 5}, "op": "reduction", "outputs": {"Y": 6}}""")

    def test_linear_3d_row_max_bf16(self) -> None:
        self.assertExpectedInline(golden("linear_3d_row_max_bf16"), """\
{"compute_dtype": "float", "inputs": [0, 1, 2], "intermediate_dtype": "float", "io_dtype": "bfloat16", "outputs": [5], "version": 1}
{"dims": [2, 8, 64], "dtype": "bfloat16", "id": 0, "strides": [512, 64, 1], "virtual": false}
{"dims": [1, 64, 32], "dtype": "bfloat16", "id": 1, "strides": [2048, 1, 64], "virtual": false}
{"dims": [1, 1, 32], "dtype": "bfloat16", "id": 2, "strides": [32, 32, 1], "virtual": false}
{"dims": [2, 8, 32], "dtype": "float", "id": 3, "strides": [256, 32, 1], "virtual": true}
{"dims": [2, 8, 32], "dtype": "float", "id": 4, "strides": [256, 32, 1], "virtual": true}
{"dims": [2, 8, 1], "dtype": "float", "id": 5, "strides": [8, 1, 1], "virtual": false}
{"attrs": {}, "inputs": {"A": 0, "B": 1}, "op": "matmul", "outputs": {"C": 3}}
{"attrs": {"mode": "add"}, "inputs": {"IN_0": 3, "IN_1": 2}, "op": "pointwise", "outputs": {"OUT_0": 4}}
{"attrs": {"mode": "max"}, "inputs": {"X": 4}, "op": "reduction", "outputs": {"Y": 5}}""")

    def test_matmul_row_mean_float(self) -> None:
        self.assertExpectedInline(golden("matmul_row_mean_float"), """\
{"compute_dtype": "float", "inputs": [0, 1], "intermediate_dtype": "float", "io_dtype": "float", "outputs": [4], "version": 1}
{"dims": [2, 8, 64], "dtype": "float", "id": 0, "strides": [512, 64, 1], "virtual": false}
{"dims": [2, 64, 32], "dtype": "float", "id": 1, "strides": [2048, 32, 1], "virtual": false}
{"dims": [2, 8, 32], "dtype": "float", "id": 2, "strides": [256, 32, 1], "virtual": true}
{"dims": [2, 8, 32], "dtype": "float", "id": 3, "strides": [256, 32, 1], "virtual": true}
{"dims": [2, 8, 1], "dtype": "float", "id": 4, "strides": [8, 1, 1], "virtual": false}
{"attrs": {}, "inputs": {"A": 0, "B": 1}, "op": "matmul", "outputs": {"C": 2}}
{"attrs": {"mode": "mul", "scalar": 0.03125}, "inputs": {"IN_0": 2}, "op": "pointwise", "outputs": {"OUT_0": 3}}
{"attrs": {"mode": "add"}, "inputs": {"X": 3}, "op": "reduction", "outputs": {"Y": 4}}""")

    def test_bn_relu_prologue_linear_half(self) -> None:
        self.assertExpectedInline(golden("bn_relu_prologue_linear_half"), """\
{"compute_dtype": "float", "inputs": [0, 1, 2, 3, 4], "intermediate_dtype": "half", "io_dtype": "half", "outputs": [9], "version": 1}
{"dims": [1, 8, 64], "dtype": "half", "id": 0, "strides": [512, 64, 1], "virtual": false}
{"dims": [1, 1, 64], "dtype": "half", "id": 1, "strides": [64, 64, 1], "virtual": false}
{"dims": [1, 1, 64], "dtype": "half", "id": 2, "strides": [64, 64, 1], "virtual": false}
{"dims": [1, 64, 32], "dtype": "half", "id": 3, "strides": [2048, 1, 64], "virtual": false}
{"dims": [1, 1, 32], "dtype": "half", "id": 4, "strides": [32, 32, 1], "virtual": false}
{"dims": [1, 8, 64], "dtype": "half", "id": 5, "strides": [512, 64, 1], "virtual": true}
{"dims": [1, 8, 64], "dtype": "half", "id": 6, "strides": [512, 64, 1], "virtual": true}
{"dims": [1, 8, 64], "dtype": "half", "id": 7, "strides": [512, 64, 1], "virtual": true}
{"dims": [1, 8, 32], "dtype": "half", "id": 8, "strides": [256, 32, 1], "virtual": true}
{"dims": [1, 8, 32], "dtype": "half", "id": 9, "strides": [256, 32, 1], "virtual": false}
{"attrs": {"mode": "mul"}, "inputs": {"IN_0": 0, "IN_1": 1}, "op": "pointwise", "outputs": {"OUT_0": 5}}
{"attrs": {"mode": "add"}, "inputs": {"IN_0": 5, "IN_1": 2}, "op": "pointwise", "outputs": {"OUT_0": 6}}
{"attrs": {"mode": "relu_fwd"}, "inputs": {"IN_0": 6}, "op": "pointwise", "outputs": {"OUT_0": 7}}
{"attrs": {}, "inputs": {"A": 7, "B": 3}, "op": "matmul", "outputs": {"C": 8}}
{"attrs": {"mode": "add"}, "inputs": {"IN_0": 8, "IN_1": 4}, "op": "pointwise", "outputs": {"OUT_0": 9}}""")
