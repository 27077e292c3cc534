"""A catalog of CUDA-typed TorchScript graphs for the cuDNN backend's tests.

    import patterns                          # test/cudnn is on sys.path under pytest
    from pattern_ir import cpu_graph, example_inputs, graph
    for name, pattern in patterns.PATTERNS.items():
        g = graph(pattern)                   # typed on cuda:0: what a GPU profile gives
        g_cpu = cpu_graph(pattern)           # the same graph typed on cpu
        xs = example_inputs(g_cpu)           # random CPU tensors of the inputs' types
        pattern.groups                       # the cuDNN groups expected, as node kinds
        pattern.refusal                      # a reason the report must give, or ""

How a pattern is written: pattern_ir.py. PATTERNS covers every pattern the cuDNN
backend fuses: conv2d (NCHW and channels-last, `_convolution` and `conv2d`) and
matmul / bmm / linear / addmm anchors (conv_patterns.py, matmul_patterns.py);
epilogues bias, residual add, scale, relu, gelu (erf and tanh), sigmoid, tanh,
silu, clamp / relu6 and a final channel / row reduction (sum, mean, max); the
scale + bias + relu prologue on the conv X / matmul A; float16, bfloat16 and
float32; and the refusals (refusal_patterns.py: prologue on the weight, two
reductions, a reduction mid-DAG, a cycle, pointwise only, a convolution that is
not channels_last with more than cuDNN fuses there, ...).
"""

from __future__ import annotations

import conv_patterns
import matmul_patterns
import refusal_patterns
from pattern_ir import Pattern

PATTERNS: dict[str, Pattern] = {**conv_patterns.PATTERNS, **matmul_patterns.PATTERNS,
                                **refusal_patterns.PATTERNS}
