"""cuDNN's deviceless tier: cuDNN checks support and builds plans for an H100, A100
and B200 from device descriptions (device_specs.py), with no GPU, through
deviceless.py in subprocesses that load the driver stand-in (conftest.py's
deviceless_env): every hand-built IR and every group the partitioner forms plans,
and what cuDNN's rules exclude is refused. Skips without the frontend (the `cuda`
extra)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from hand_built_ir import (
    HAND_BUILT,
    bmm_scaled_row_max,
    conv_epilogue,
    conv_residual_gelu_channel_sum,
    prologue_conv,
)
from lowered_patterns import every_lowered

from torch_graphfuse.backends.cudnn import device_specs, deviceless, ir
from torch_graphfuse.backends.cudnn.ir_maker import contiguous, nhwc

DEVICES = tuple(device_specs.DEVICES)


def plan_deviceless(env: dict[str, str], graphs: dict[str, ir.Graph]
                    ) -> dict[str, dict[str, dict]]:
    """deviceless.plan_deviceless of each graph for each device: one subprocess per
    device, all at once, each with the driver stand-in on its library path."""
    payload = json.dumps([json.loads(g.to_json()) for g in graphs.values()])
    runs = {device: subprocess.Popen([sys.executable, "-m", deviceless.__name__, device],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, env=env)
            for device in DEVICES}
    results = {}
    for device, run in runs.items():
        out, err = run.communicate(payload, timeout=600)
        assert run.returncode == 0, err[-4000:]
        results[device] = dict(zip(graphs, json.loads(out), strict=True))
    return results


# IRs cuDNN 9.24 refuses, and on which GPUs: the rules the partitioner and the
# lowering respect (group_rules.py: reductions write float, _check_conv_layout), each
# found by changing only that in an IR cuDNN plans.
REFUSED: dict[str, tuple[Callable[[], ir.Graph], set[str]]] = {
    # Runtime fusion engines keep a prologue's intermediates in the io type on
    # sm_90 and sm_100 (group_rules.py does); sm_80 takes float too.
    "prologue_conv_float_intermediate": (lambda: prologue_conv("float"), {"H100", "B200"}),
    # A reduction writes float, whatever the io type.
    "conv_channel_sum_to_half": (lambda: conv_residual_gelu_channel_sum(out_dtype="half"),
                                 set(DEVICES)),
    "bmm_row_max_to_half": (lambda: bmm_scaled_row_max("half"), set(DEVICES)),
    # A conv result that is not channels_last: a bias and one relu / tanh / sigmoid,
    # or broadcast operands before a final reduction, and no prologue.
    "conv_nchw_bias_gelu": (lambda: conv_epilogue(("bias", "gelu_fwd")), set(DEVICES)),
    "conv_nchw_relu_without_bias": (lambda: conv_epilogue(("relu_fwd",)), set(DEVICES)),
    "conv_nchw_bias_residual_relu": (lambda: conv_epilogue(("bias", "residual", "relu_fwd")),
                                     set(DEVICES)),
    "conv_nchw_residual_channel_sum": (lambda: conv_residual_gelu_channel_sum(contiguous),
                                       set(DEVICES)),
    "prologue_conv_nchw": (lambda: prologue_conv("half", contiguous), set(DEVICES)),
    # A channels_last conv reading a full-size tensor that is not.
    "conv_nhwc_nchw_residual": (lambda: conv_epilogue(("bias", "residual", "relu_fwd"), nhwc,
                                                      residual=contiguous), set(DEVICES)),
}


PATTERN_PREFIX = "pattern:"


@pytest.fixture(scope="module")
def deviceless_by_device(deviceless_env: dict[str, str]) -> dict[str, dict[str, dict]]:
    graphs = {name: make() for name, make in HAND_BUILT.items()}
    graphs.update((name, make()) for name, (make, _) in REFUSED.items())
    graphs.update((PATTERN_PREFIX + name, g) for name, g in every_lowered().items())
    return plan_deviceless(deviceless_env, graphs)


@pytest.fixture(params=DEVICES)
def planned(request: pytest.FixtureRequest,
            deviceless_by_device: dict[str, dict[str, dict]]) -> tuple[str, dict[str, dict]]:
    return request.param, deviceless_by_device[request.param]


def test_every_hand_built_ir_gets_a_serialized_plan(planned: tuple[str, dict]) -> None:
    device, results = planned
    for name in HAND_BUILT:
        result = results[name]
        assert result["supported"], (name, result["failed_step"], result["error"][-500:])
        assert result["plan_count"] >= 1 and result["plan_bytes"] > 0, name


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_cudnn_refuses_what_its_rules_exclude(planned: tuple[str, dict], name: str) -> None:
    device, results = planned
    result = results[name]
    if device in REFUSED[name][1]:
        assert not result["supported"], name
        # No engine offers a plan, or none of those offered builds.
        assert result["failed_step"] in ("create_execution_plans", "build_plans"), \
            result["error"][-500:]
    else:
        assert result["supported"], (name, result["error"][-500:])


def test_cudnn_plans_every_group_the_partitioner_forms(planned: tuple[str, dict]) -> None:
    device, results = planned
    refused = [f"{key.removeprefix(PATTERN_PREFIX)}: refused on {device} at "
               f"{result['failed_step']}: {result['error'][:300]}"
               for key, result in results.items()
               if key.startswith(PATTERN_PREFIX) and not result["supported"]]
    assert not refused, "\n".join(refused)
    for key, result in results.items():
        if key.startswith(PATTERN_PREFIX):
            assert result["plan_count"] >= 1 and result["plan_bytes"] > 0, key


def test_driver_stand_in_never_loads_in_the_test_process(
        planned: tuple[str, dict], deviceless_env: dict[str, str]) -> None:
    # The stand-in, not any libcuda: on a GPU machine the real driver is mapped.
    stand_in = deviceless_env["LD_LIBRARY_PATH"].split(os.pathsep)[0]
    maps = Path("/proc/self/maps")
    if maps.exists():
        assert stand_in not in maps.read_text()
