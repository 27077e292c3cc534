"""oneDNN's verbose output (ONEDNN_VERBOSE=1), read back: which primitives ran, with
which implementation. oneDNN 3.x writes

    onednn_verbose,[<timestamp>,]v1,primitive,exec,cpu,<kind>,<implementation>,...
    onednn_verbose,[<timestamp>,]v1,graph,exec,cpu,<partition id>,<partition kind>,...

A primitive run by oneDNN's reference implementation names it `ref:any` (or another
`ref` one): orders of magnitude slower than ATen, never acceptable inside a fused group.
`ref_fused_convolution` is the exception where the kernels it chains are not reference ones.
Nor is the generic layer norm (`simple:any`), 70 times slower than its JIT kernel.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Execution:
    kind: str  # "convolution", "reorder", ...
    implementation: str  # "brg_conv_fwd:avx512_core", "ref:any", ...
    line: str

    @property
    def slow(self) -> bool:
        """Whether ATen runs the op faster (the kernel's own test, csrc/onednn/verbose.h).
        A 1x1 and a depthwise convolution fused run as `ref_fused_convolution:any:` and the
        two kernels it chains: slow only if one of those is a reference one."""
        fused = "ref_fused_convolution:any:"
        if self.implementation.startswith(fused):
            return ":ref" in self.implementation[len(fused) - 1:]
        return self.implementation.startswith("ref") or (
            self.kind == "layer_normalization" and self.implementation.startswith("simple"))


def primitive_executions(output: str) -> list[Execution]:
    """The primitive executions among verbose lines, in order."""
    found = []
    for line in output.splitlines():
        if not line.startswith("onednn_verbose,"):
            continue
        fields = line.split(",")
        try:
            at = fields.index("primitive")
        except ValueError:
            continue
        if fields[at + 1: at + 3] == ["exec", "cpu"] and len(fields) > at + 4:
            found.append(Execution(fields[at + 3], fields[at + 4], line))
    return found
