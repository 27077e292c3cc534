"""Regression tests for results that once differed from eager with no error: in-place
order, aliasing, broadcasting and pooling windows. Each is named after the defect it
pins; test_eager_numerics.py holds the dtype, layout and op-numerics ones."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from fusion_check import Program, assert_matches, eager, fuse, fused_and_eager, precision, run
from torch import nn

import torch_graphfuse
from torch_graphfuse import last_report
from torch_graphfuse.backends.onednn import op_table, rules


def test_read_before_inplace_write_keeps_its_order() -> None:
    def fn(self, x):  # noqa: ANN001, ANN202
        a = x * 2.0
        x.relu_()
        return a + x

    out, ref, _ = fused_and_eager(Program(fn), [torch.randn(4, 8)])
    assert_matches(out, ref, "fp32")


def test_read_before_inplace_write_through_a_view_keeps_its_order() -> None:
    def fn(self, x):  # noqa: ANN001, ANN202
        y = x + 1.0
        a = y * 2.0
        y.view(-1).relu_()
        return a + y

    out, ref, _ = fused_and_eager(Program(fn), [torch.randn(4, 8)])
    assert_matches(out, ref, "fp32")


def test_identity_op_on_an_input_returns_a_new_tensor() -> None:
    x = torch.randn(4, 8)
    module, _, _ = fuse(Program(lambda self, x: x * 1.0), [x])
    out = run(module, [x])
    assert out.data_ptr() != x.data_ptr()
    out.add_(1.0)
    torch.testing.assert_close(out - 1.0, x)


def test_identity_op_before_an_inplace_write_of_its_input_keeps_the_old_value() -> None:
    def fn(self, x):  # noqa: ANN001, ANN202
        y = x * 1.0
        x.sub_(0.5)
        return y * 3.0

    out, ref, _ = fused_and_eager(Program(fn), [torch.randn(4, 8)])
    assert_matches(out, ref, "fp32")


@pytest.mark.parametrize(("dtype", "aliases"), [("Float", True), ("BFloat16", False)])
def test_a_cast_to_the_inputs_own_dtype_counts_as_a_view_of_it(dtype: str,
                                                               aliases: bool) -> None:
    # Fuzzer seed 2701, fp32:2950: `x.to(torch.float32).flatten(3, 3).mul_(0)` (Llama's
    # norm casts to float32 first) is x itself in eager, so mul_ writes the caller's x; a
    # group making the cast and the view returned a copy, and x was left as it was.
    code = {"Float": 6, "BFloat16": 15}[dtype]
    graph = torch._C.parse_ir(f"""
        graph(%x : Float(2, 3, strides=[3, 1], device=cpu)):
          %code : int = prim::Constant[value={code}]()
          %no : bool = prim::Constant[value=0]()
          %none : NoneType = prim::Constant()
          %one : int = prim::Constant[value=1]()
          %c : {dtype}(2, 3, strides=[3, 1], device=cpu) = aten::to(%x, %code, %no, %no, %none)
          %v : {dtype}(2, 3, strides=[3, 1], device=cpu) = aten::flatten(%c, %one, %one)
          return (%v)""")
    nodes = [n for n in graph.nodes() if n.kind() in ("aten::to", "aten::flatten")]
    assert rules._aliased_output(nodes, [nodes[-1].output().unique()]) == aliases


def test_view_of_an_input_is_not_returned_as_a_copy() -> None:
    def fn(self, x):  # noqa: ANN001, ANN202
        return x.t(), x * 2.0 + 1.0

    x = torch.randn(4, 8)
    module, _, _ = fuse(Program(fn), [x])
    view, _ = run(module, [x])
    assert view.data_ptr() == x.data_ptr()


@pytest.mark.parametrize("x_shape,w_shape", [((2, 3, 1), (1, 3, 1)), ((2, 3, 1), (3, 1)),
                                             ((4, 16, 1, 1), (1, 16, 1, 1))])
def test_broadcast_over_batch_with_trailing_size_one_dims(x_shape, w_shape) -> None:  # noqa: ANN001
    model = Program(lambda self, x: x * 2.0 + self.w, w=torch.randn(*w_shape))
    out, ref, _ = fused_and_eager(model, [torch.randn(*x_shape)])
    assert_matches(out, ref, "fp32")


def test_broadcast_operand_that_could_meet_the_batch_bug_pins_sizes() -> None:
    # Profiled at spatial size 4 (safe), called at spatial size 1 (the bug's case).
    model = Program(lambda self, x: x * 2.0 + self.w, w=torch.randn(1, 3, 1))
    module, _, _ = fuse(model, [torch.randn(2, 3, 4)])
    x = torch.randn(2, 3, 1)
    assert_matches(run(module, [x]), eager(model, [x]), "fp32")


def test_batch_one_input_meeting_a_batch_of_constants_pins_sizes() -> None:
    # Found by the fuzzer: profiled with x as (3, 6, 1) like the constant, called
    # with (1, 6, 1), which oneDNN (v3.2 and 3.12) broadcasts over the constant's batch
    # wrongly.
    model = Program(lambda self, x: torch.add(x, self.c, alpha=2), c=torch.randn(3, 6, 1))
    module, _, _ = fuse(model, [torch.randn(3, 6, 1)])
    x = torch.randn(1, 6, 1)
    assert_matches(run(module, [x]), eager(model, [x]), "fp32")


def test_dilated_max_pool_window_holding_no_input_element() -> None:
    # Found by the fuzzer: at width 1, padding 1 and dilation 2 the window's
    # taps are both padding: eager gives -inf, oneDNN (v3.2 and 3.12) -FLT_MAX.
    model = Program(lambda self, x: F.max_pool2d(x, (1, 2), (1, 1), (0, 1), 2))
    module, _, _ = fuse(model, [torch.randn(3, 1, 1, 2)])
    x = torch.randn(4, 1, 1, 1)
    assert_matches(run(module, [x]), eager(model, [x]), "fp32")


def test_broadcast_after_linear_with_one_output_feature() -> None:
    model = Program(lambda self, x: self.lin(x) * 2.0 + self.w, w=torch.randn(1, 5, 1))
    model.lin = nn.Linear(8, 1)
    out, ref, _ = fused_and_eager(model, [torch.randn(3, 5, 8)])
    assert_matches(out, ref, "fp32")


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_column_major_inputs_after_row_major_profiling(dtype: str) -> None:
    model = Program(lambda self, x, y: x * y + self.w - x, w=torch.randn(3))
    module, _, _ = fuse(model, [torch.randn(9, 3), torch.randn(9, 3)], dtype)
    x, y = torch.randn(3, 9).t(), torch.randn(3, 9).t()
    assert_matches(run(module, [x, y], dtype), eager(model, [x, y], dtype), dtype)


def test_bf16_upcast_of_a_fused_result_keeps_eager_rounding() -> None:
    conv = nn.Conv2d(4, 8, 3, padding=1)
    model = Program(lambda self, x, r: torch.relu(self.conv(x)) + r)
    model.conv = conv
    inputs = [torch.randn(1, 4, 8, 8), torch.randn(1, 8, 8, 8)]
    with precision("bf16"):
        module, _, _ = fuse(model, inputs, "bf16")
    out = run(module, inputs, "bf16")
    ref = eager(model, inputs, "bf16")
    assert out.dtype == ref.dtype == torch.float32
    torch.testing.assert_close(out, ref, rtol=0, atol=0)


def test_softplus_threshold_is_honoured() -> None:
    model = Program(lambda self, x: F.softplus(x * 2.0, beta=1.0, threshold=1.0))
    out, ref, _ = fused_and_eager(model, [torch.randn(4, 8)])
    assert_matches(out, ref, "fp32")


def test_softplus_stays_with_aten() -> None:
    model = Program(lambda self, x: F.softplus(x * 2.0))
    out, ref, graph = fused_and_eager(model, [torch.randn(4, 8) * 20])
    assert_matches(out, ref, "fp32")
    assert ("aten::softplus", op_table.NOT_MAPPED["aten::softplus"]) in last_report().unmapped


@pytest.mark.parametrize("pool", ["max", "avg"])
def test_ceil_mode_pool_on_a_new_input_shape(pool: str) -> None:
    def fn(self, x):  # noqa: ANN001, ANN202
        y = x * 2.0
        if pool == "max":
            return F.max_pool2d(y, 2, 2, 1, ceil_mode=True)
        return F.avg_pool2d(y, 2, 2, 1, ceil_mode=True, count_include_pad=False)

    model = Program(fn)
    module, _, _ = fuse(model, [torch.randn(1, 4, 5, 5)])
    x = torch.randn(1, 4, 7, 7)
    out, ref = run(module, [x]), eager(model, [x])
    assert out.shape == ref.shape
    assert_matches(out, ref, "fp32")


@pytest.mark.parametrize("dims", [1, 2, 3])
@pytest.mark.parametrize("combine", ["add", "mul"])
def test_batch_norm_of_a_conv_combined_with_the_conv(dims: int, combine: str) -> None:
    conv = {1: nn.Conv1d, 2: nn.Conv2d, 3: nn.Conv3d}[dims](3, 4, 3)
    bn = {1: nn.BatchNorm1d, 2: nn.BatchNorm2d, 3: nn.BatchNorm3d}[dims](4)
    bn.running_mean.uniform_(-1, 1)
    bn.running_var.uniform_(0.5, 2)

    def fn(self, x):  # noqa: ANN001, ANN202
        y = self.conv(x)
        return self.bn(y) + y if combine == "add" else self.bn(y) * y

    model = Program(fn)
    model.conv, model.bn = conv, bn
    out, ref, _ = fused_and_eager(model, [torch.randn(1, 3, *([6] * dims))])
    assert_matches(out, ref, "fp32")


@pytest.mark.parametrize("x_shape,c_shape", [((3, 6, 9, 9), (1, 6, 9, 1)),
                                             ((3, 4, 5, 6), (1, 4, 5, 6)),
                                             ((3, 4, 6), (3, 1, 1)), ((3, 4, 6), (1, 4, 1))])
def test_linear_result_broadcast_over_batch_dims(x_shape, c_shape) -> None:  # noqa: ANN001
    # Found by the fuzzer: oneDNN flattens a linear's batch dims and indexes
    # such an operand of its binary post-op wrongly.
    model = Program(lambda self, x: self.lin(x) * self.c, c=torch.randn(*c_shape))
    model.lin = nn.Linear(x_shape[-1], c_shape[-1] if c_shape[-1] > 1 else 3)
    out, ref, _ = fused_and_eager(model, [torch.randn(*x_shape)])
    assert_matches(out, ref, "fp32")


def test_linear_result_operand_that_broadcasts_at_another_batch_runs_unfused_there() -> None:
    # Profiled at batch 1, where the operand has the result's shape; at batch 3 it is
    # broadcast over the batch, which oneDNN 3.12 runs with its reference kernel: the
    # kernel's compile finds it and runs that spec unfused.
    model = Program(lambda self, x: self.lin(x) + self.c, c=torch.randn(1, 4, 5, 6))
    model.lin = nn.Linear(6, 6)
    module, _, _ = fuse(model, [torch.randn(1, 4, 5, 6)])
    torch_graphfuse.reset_kernel_stats()
    x = torch.randn(3, 4, 5, 6)
    assert_matches(run(module, [x]), eager(model, [x]), "fp32")
    assert torch_graphfuse.kernel_stats()["unfused_specs"] == 1
