"""What the passes and the backends know of aten ops and dtypes, whatever backend runs them.

A backend's op table says only what its backend does with an op; the facts about the op
itself (which ops are views, which are elementwise, how TorchScript spells a dtype) are
here, once.
"""

from __future__ import annotations

import torch

# c10::ScalarType codes: TorchScript passes a dtype argument (`x.to(dtype)`, a quantize's
# dtype) as one.
SCALAR_TYPE_CODE: dict[torch.dtype, int] = {
    torch.uint8: 0, torch.int8: 1, torch.float16: 5, torch.float32: 6, torch.float64: 7,
    torch.qint8: 12, torch.quint8: 13, torch.bfloat16: 15,
}
DTYPE_OF_CODE: dict[int, torch.dtype] = {code: dtype for dtype, code in SCALAR_TYPE_CODE.items()}

# The floating dtypes the passes prepare ops for fusion in (decompose, prepare_binary): a
# backend may take others too, and says so in its own mapping.
FUSION_DTYPES = (torch.float32, torch.bfloat16)

# Ops whose eager result may be a view of their input.
VIEW_KINDS = frozenset({
    "aten::reshape", "aten::view", "aten::flatten", "aten::squeeze", "aten::unsqueeze",
    "aten::permute", "aten::transpose", "aten::t", "aten::contiguous",
})

# Ops that give their input's elements under a shape argument (view where the strides allow,
# reshape copying where they do not).
RESHAPES = frozenset({"aten::view", "aten::reshape"})

# How TorchScript passes torch.contiguous_format as a memory format argument.
CONTIGUOUS_FORMAT = 0

# Unary elementwise ops: each element of the result from the same element of the one
# tensor input, so the result has the input's sizes.
UNARY_ELEMENTWISE = frozenset({
    "aten::tanh", "aten::log", "aten::sqrt", "aten::abs", "aten::square", "aten::hardswish",
    "aten::reciprocal", "aten::round", "aten::relu", "aten::exp", "aten::sigmoid",
    "aten::relu6", "aten::hardsigmoid", "aten::gelu", "aten::silu", "aten::leaky_relu",
    "aten::elu", "aten::clamp", "aten::clamp_min", "aten::clamp_max", "aten::hardtanh",
    "aten::softplus",
})

# The binary arithmetic ops: two operands broadcast against each other (numpy's rules),
# add and sub with an `alpha` that scales the second, div with a rounding mode.
BINARY_ARITHMETIC = ("aten::add", "aten::sub", "aten::mul", "aten::div")
