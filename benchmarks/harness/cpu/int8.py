"""The int8 comparison: a float model statically quantized by each recipe from one calibration
set, the int8 peers that run the results, and their top-1 agreement with the float model."""

from __future__ import annotations

import copy
import dataclasses
import logging
import math
import time
from collections.abc import Callable

import torch
from torch import nn

from torch_graphfuse.testing import quantize, runner

from ..calls import Forward, Inputs
from ..text import NotInstalled, progress
from .compare import Comparison, compare
from .configs import INT8, Config, model_and_inputs
from .peers import Built, Peer, fusers
from .timing import StallProbe, Timing, ms_since

CALIBRATION_SAMPLES = 16  # per int8 configuration, in batches of the configuration's size
CALIBRATION_SAMPLES_QUICK = 4


@dataclasses.dataclass(frozen=True)
class Int8Models:
    """A float model and its statically quantized versions, from one calibration set. Called,
    it runs the reference quantized model: the PT2E GraphModule in eager PyTorch."""

    fp32: nn.Module
    pt2e: torch.fx.GraphModule  # torchao PT2E, X86InductorQuantizer
    fbgemm: torch.fx.GraphModule  # torch.ao FX, converted to the x86 engine's quantized ops
    calibration: list[Inputs]
    transformer: bool

    def __call__(self, *inputs: torch.Tensor) -> torch.Tensor:
        return self.pt2e(*inputs)


def int8_models(model: nn.Module, config: Config, quick: bool) -> Int8Models:
    """Quantize `model` for an int8 configuration: calibration batches of the configuration's
    batch size (PT2E exports with static shapes), drawn from its input distribution."""
    samples = CALIBRATION_SAMPLES_QUICK if quick else CALIBRATION_SAMPLES
    calibration = [config.workload.inputs(config.batch)
                   for _ in range(max(1, samples // config.batch))]
    example = calibration[0]
    only = (nn.Linear,) if config.workload.transformer else None
    return Int8Models(model, quantize.pt2e(model, example, calibration),
                      quantize.fx_fbgemm(model, example, calibration, only), calibration,
                      config.workload.transformer)


def _profiled(module: torch.jit.ScriptModule, inputs: Inputs) -> Forward:
    """Run the profiling runs: the fusers compile at the last one."""
    for _ in range(runner.PROFILING_RUNS):
        module(*inputs)
    return module


def _graphfuse_fp32(models: Int8Models, inputs: Inputs) -> Forward:
    return _profiled(runner.freeze(models.fp32, inputs), inputs)


def _graphfuse_int8(models: Int8Models, inputs: Inputs) -> Forward:
    return _profiled(quantize.freeze_quantized(models.pt2e, inputs), inputs)


def _eager_int8(models: Int8Models, inputs: Inputs) -> Forward:
    torch.backends.quantized.engine = "x86"
    return models.fbgemm


def _inductor_int8(models: Int8Models, inputs: Inputs) -> Forward:
    torch._dynamo.reset()
    torch._inductor.config.freezing = True
    compiled = torch.compile(copy.deepcopy(models.pt2e), backend="inductor")
    compiled(*inputs)
    return compiled


def _openvino_int8(models: Int8Models, inputs: Inputs) -> Forward:
    """The float model converted by OpenVINO, quantized by NNCF's post-training quantization
    on the same calibration batches, compiled for the CPU with torch's thread count."""
    try:
        import nncf
        import openvino as ov
    except ImportError as error:
        raise NotInstalled(error.name or "openvino / nncf") from error

    nncf.set_log_level(logging.WARNING)
    converted = ov.convert_model(copy.deepcopy(models.fp32), example_input=tuple(inputs))
    dataset = nncf.Dataset(models.calibration, lambda batch: tuple(t.numpy() for t in batch))
    quantized = nncf.quantize(
        converted, dataset, subset_size=len(models.calibration),
        model_type=nncf.ModelType.TRANSFORMER if models.transformer else None)
    compiled = ov.Core().compile_model(quantized, "CPU", {
        "INFERENCE_NUM_THREADS": torch.get_num_threads(), "PERFORMANCE_HINT": "LATENCY"})
    progress(f"  OpenVINO {ov.get_version()}, NNCF {nncf.__version__}, inference precision "
             f"{compiled.get_property('INFERENCE_PRECISION_HINT')}")
    request = compiled.create_infer_request()

    def forward(*args: torch.Tensor) -> torch.Tensor:
        return torch.from_numpy(request.infer([a.numpy() for a in args], share_inputs=True)[0])

    return forward


INT8_PEERS = (
    Peer("graphfuse_fp32", "torch_graphfuse fp32", _graphfuse_fp32, graphfuse=True,
         first_calls=0, forward=True),
    Peer("eager_int8", "eager int8 (x86 engine)", _eager_int8, first_calls=0, forward=True),
    Peer("inductor_int8", "torch.compile int8 (inductor, PT2E)", _inductor_int8,
         first_calls=0, forward=True),
    Peer("openvino_int8", "OpenVINO int8 (NNCF)", _openvino_int8, first_calls=0, forward=True),
    Peer("graphfuse_int8", "torch_graphfuse int8 (PT2E)", _graphfuse_int8, graphfuse=True,
         first_calls=0, forward=True),
)
GRAPHFUSE_FP32, GRAPHFUSE_INT8 = INT8_PEERS[0], INT8_PEERS[-1]


def top1_agreement(models: Int8Models, config: Config, samples: int) -> Callable[[Built], float]:
    """The share of `samples` synthetic inputs (whole batches of the configuration's size, from
    its input distribution) where a peer's top-1 class is the float model's."""
    torch.manual_seed(1)
    batches = [config.workload.inputs(config.batch)
               for _ in range(max(1, math.ceil(samples / config.batch)))]
    with torch.no_grad():
        expected = [models.fp32(*batch).argmax(-1) for batch in batches]

    def share(built: Built) -> float:
        if built.forward is None:
            raise ValueError("the peer runs its benchmark inputs only")
        same = 0
        with torch.no_grad(), fusers(built.peer.onednn, built.peer.graphfuse):
            for batch, classes in zip(batches, expected, strict=True):
                same += int((built.forward(*batch).argmax(-1) == classes).sum())
        return same / sum(len(classes) for classes in expected)

    return share


def run_int8_config(config: Config, timing: Timing, probe: StallProbe, quick: bool,
                    samples: int) -> Comparison:
    """The int8 peers, against the reference quantized model (PT2E, eager). No first-call
    times: the quantization recipe itself (calibration) dominates a deployment's start."""
    model, inputs = model_and_inputs(config)
    start = time.perf_counter()
    models = int8_models(model, config, quick)
    progress(f"  {config.label} | quantized (PT2E and FX, {len(models.calibration)} "
             f"calibration batches) in {ms_since(start) / 1e3:.0f} s")
    agreement = top1_agreement(models, config, samples) if config.workload.classifier else None
    return compare(models, inputs, INT8, INT8_PEERS, timing, probe, config.label, agreement)
