"""Plan keys (plans/key.py): what a plan is valid for, and the precision that picks
its engines, as eager's TF32 flags say."""

from __future__ import annotations

from typing import Any

import pytest
from plan_fakes import conv_relu_ir, key_of, matmul_ir, tf32_flags

from torch_graphfuse.backends.cudnn.plans.key import deselected_notes, tf32_allowed


def test_same_ir_and_device_give_the_same_key() -> None:
    assert key_of(conv_relu_ir()).digest() == key_of(conv_relu_ir()).digest()


@pytest.mark.parametrize("change", [
    {"device_name": "NVIDIA A100-SXM4-80GB"}, {"sm_version": 80}, {"sm_count": 114},
    {"cudnn_version": 92900}, {"frontend_version": "1.33.0"}, {"tf32": True}])
def test_device_or_library_change_changes_the_key(change: dict[str, Any]) -> None:
    graph = conv_relu_ir()
    assert key_of(graph, **change).digest() != key_of(graph).digest()


def test_ir_change_changes_the_key() -> None:
    other_shape = conv_relu_ir(channels=16)
    other_mode = conv_relu_ir()
    other_mode.nodes[1].attrs["mode"] = "tanh_fwd"
    base = key_of(conv_relu_ir()).digest()
    assert key_of(other_shape).digest() != base
    assert key_of(other_mode).digest() != base


def test_tf32_follows_eager_flags_per_anchor() -> None:
    conv, matmul = conv_relu_ir(dtype="float"), matmul_ir("float")
    with tf32_flags(conv=True, matmul=False):
        assert (tf32_allowed(conv), tf32_allowed(matmul)) == (True, False)
        assert not tf32_allowed(conv_relu_ir(dtype="half"))
    with tf32_flags(conv=False, matmul=True):
        assert (tf32_allowed(conv), tf32_allowed(matmul)) == (False, True)
        assert not tf32_allowed(matmul_ir("bfloat16"))


def test_engines_that_down_convert_are_never_chosen_and_tensor_cores_only_with_tf32() -> None:
    assert deselected_notes(conv_relu_ir(dtype="half"), tf32=False) == ["DOWN_CONVERT_INPUTS"]
    assert deselected_notes(conv_relu_ir(dtype="float"), tf32=True) == ["DOWN_CONVERT_INPUTS"]
    assert deselected_notes(conv_relu_ir(dtype="float"), tf32=False) == [
        "DOWN_CONVERT_INPUTS", "TENSOR_CORE"]
