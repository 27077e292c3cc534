"""Static int8 post-training quantization recipes, as PyTorch users run them today, for the
tests and the benchmark: the PT2E flow of torchao (the X86 Inductor quantizer), and the FX
graph mode flow of torch.ao.quantization, as a reference model (quantize / dequantize around
float ops) or converted to quantized ops (the x86 quantized engine). Then trace and freeze.

All recipes quantize activations per tensor (u8, with zero points) and weights per channel
(s8, symmetric). torchao is an optional dependency (`pip install torch_graphfuse[int8]`):
only `pt2e` imports it.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterable, Iterator, Sequence

import torch
from torch import nn

Inputs = Sequence[torch.Tensor]

# torch 2.13 deprecates the quantized dtypes and torch.ao.quantization, which the FX recipes
# are about; its observers warn about reduce_range, which the default x86 qconfig sets.
# Messages, as regular expressions for warnings.filterwarnings.
DEPRECATIONS = (
    r"torch\.quantize_per_tensor, torch\.quantize_per_channel and other quantized tensor",
    r"torch\.ao\.quantization is deprecated",
    r"Please use quant_min and quant_max to specify the range for observers",
)


@contextlib.contextmanager
def quiet_deprecations() -> Iterator[None]:
    """Silence torch's deprecation warnings of the quantized dtypes and of torch.ao.quantization
    (and nothing else) inside the block."""
    with warnings.catch_warnings():
        for message in DEPRECATIONS:
            warnings.filterwarnings("ignore", message=message)
        yield


def _calibrate(prepared: nn.Module, calibration: Iterable[Inputs]) -> None:
    with torch.no_grad():
        for batch in calibration:
            prepared(*batch)


def pt2e(model: nn.Module, example_inputs: Inputs, calibration: Iterable[Inputs],
         reduce_range: bool = False) -> torch.fx.GraphModule:
    """PT2E static quantization with torchao's X86InductorQuantizer (default config):
    torch.export, prepare_pt2e, calibrate, convert_pt2e. The result holds
    quantized_decomposed.quantize_per_tensor / dequantize_per_tensor / dequantize_per_channel on
    plain uint8 / int8 tensors around float aten ops; run eagerly, it is the reference quantized
    model. Exported with static shapes: calibrate and run with the example inputs' shapes.
    BERT-style models get their linears quantized, not the attention's matmuls. `reduce_range`:
    activations quantized to [0, 127] (7-bit), which CPUs without VNNI multiply exactly."""
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e
    from torchao.quantization.pt2e.quantizer.x86_inductor_quantizer import (
        X86InductorQuantizer,
        get_default_x86_inductor_quantization_config,
    )

    quantizer = X86InductorQuantizer()
    quantizer.set_global(get_default_x86_inductor_quantization_config(reduce_range=reduce_range))
    # Strict (Dynamo) export: it names each call of a module apart. Non-strict export gives the
    # three calls of a ResNet block's shared nn.ReLU one source partition, which the quantizer's
    # conv + add + relu pattern refuses ("Input partition has more than one output node").
    exported = torch.export.export(model.eval(), tuple(example_inputs), strict=True).module()
    prepared = prepare_pt2e(exported, quantizer)
    _calibrate(prepared, calibration)
    return convert_pt2e(prepared)


def _prepare_fx(model: nn.Module, example_inputs: Inputs, calibration: Iterable[Inputs],
                only: tuple[type[nn.Module], ...] | None) -> torch.fx.GraphModule:
    from torch.ao.quantization import QConfigMapping, get_default_qconfig_mapping
    from torch.ao.quantization.backend_config.x86 import get_x86_backend_config
    from torch.ao.quantization.quantize_fx import prepare_fx

    mapping = get_default_qconfig_mapping("x86")
    if only is not None:
        qconfig, mapping = mapping.global_qconfig, QConfigMapping()
        for module_type in only:
            mapping.set_object_type(module_type, qconfig)
    prepared = prepare_fx(model.eval(), mapping, tuple(example_inputs),
                          backend_config=get_x86_backend_config())
    _calibrate(prepared, calibration)
    return prepared


def fx_reference(model: nn.Module, example_inputs: Inputs, calibration: Iterable[Inputs],
                 only: tuple[type[nn.Module], ...] | None = None) -> torch.fx.GraphModule:
    """FX graph mode static quantization, reference form: prepare_fx with the default x86
    qconfig mapping (per-tensor u8 activations with reduce_range, per-channel symmetric s8
    weights) and the x86 backend config, calibrate, convert_to_reference_fx. The result holds
    quantize_per_tensor / dequantize (quantized dtypes) around float conv / linear / add /
    matmul. `only`: quantize just these module types (BERT: (nn.Linear,), as the X86 Inductor
    quantizer does: the default mapping also quantizes the attention's matmuls and adds, which
    costs a BERT layer most of its accuracy)."""
    from torch.ao.quantization.backend_config.x86 import get_x86_backend_config
    from torch.ao.quantization.quantize_fx import convert_to_reference_fx

    with quiet_deprecations():
        prepared = _prepare_fx(model, example_inputs, calibration, only)
        return convert_to_reference_fx(prepared, backend_config=get_x86_backend_config())


def fx_fbgemm(model: nn.Module, example_inputs: Inputs, calibration: Iterable[Inputs],
              only: tuple[type[nn.Module], ...] | None = None) -> torch.fx.GraphModule:
    """The same FX recipe as fx_reference, converted by convert_fx to quantized ops (quantized
    conv / linear modules of the x86 engine, fbgemm and oneDNN): eager int8 PyTorch. Sets
    torch.backends.quantized.engine to "x86", which running it needs."""
    from torch.ao.quantization.backend_config.x86 import get_x86_backend_config
    from torch.ao.quantization.quantize_fx import convert_fx

    torch.backends.quantized.engine = "x86"
    with quiet_deprecations():
        prepared = _prepare_fx(model, example_inputs, calibration, only)
        return convert_fx(prepared, backend_config=get_x86_backend_config())


def freeze_quantized(gm: nn.Module, example_inputs: Inputs) -> torch.jit.ScriptModule:
    """torch.jit.trace and torch.jit.freeze, as a user deploying a quantized model would.
    Freezing folds a PT2E model's dequantize_per_channel of its constant int8 weights into
    float weight constants; a reference FX model keeps its qint8 weights and aten::dequantize."""
    with torch.no_grad(), quiet_deprecations():
        # An exported model refuses .eval(); the traced module takes it.
        traced = torch.jit.trace(gm, tuple(example_inputs), check_trace=False)
        return torch.jit.freeze(traced.eval())
