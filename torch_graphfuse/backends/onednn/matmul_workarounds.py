"""oneDNN 3.12's defects that a matmul's operands can meet, one predicate each (see
workarounds.py): the layouts and broadcasts it computes wrongly, and the weights it packs
only in a partition of one product."""

from __future__ import annotations

from .graph_desc import BackendGraph, BackendOp
from .workarounds import BINARY_OPS, SizeVerdict

# Ops a matmul's operand passes through unchanged in layout inside a partition.
_LAYOUT_KEEPING = frozenset({"Quantize", "Dequantize", "TypeCast"})


def matmul_operand_layout(ops: list[BackendOp], backend: BackendGraph) -> SizeVerdict:
    """A matmul operand, as given, that oneDNN 3.12 computed wrongly with (found by the
    fuzzer, seeds 2779 and 2812; sweeps of all 24 orders of a 4-d operand against batch
    shapes that broadcast or not, at matrix sizes 1-5):
    - batch dims (those before the last two, of size > 1) not outer to inner in memory,
      with a matrix dim of size 1: `v @ v.transpose(-1, -2)` of `x.permute(1, 0, 2, 3)`
      at K = 1, off by up to 16 (at K = 2 and 5 right: Swin's linears read their permuted
      windows so), pinned to the profiled sizes where no matrix dim is 1 yet;
    - a first operand stored transposed (its rows innermost) with a batch dim between its
      rows and columns: `v.transpose(3, 0)` of an int8 operand at K = 2;
    - a batch dim but the last stored inside the matrix (inner to a matrix dim of size
      > 1), in a product that broadcasts a batch dim or with batch dims not outer to
      inner: `x.permute(2, 0, 1, 3) @ x.transpose(-1, -2)`, x of (1, 2, 4, 5), read out
      of bounds (1e12 where eager gives 0.2) whenever a matrix dim's size equals a batch
      dim's; pinned where no batch dim broadcasts yet.
    Attention's `q @ k.transpose(-1, -2)`, its heads (the last batch dim) between rows and
    columns, is none of these. At each call, the kernel also copies row-major an operand in
    a layout outside those its matmul reads right (`matmul_reads_as_given` in
    csrc/onednn/layout.h: its batch test takes a packed qkv query at batch = 3 x tokens for
    contiguous batches, 2-9 off), which no profiled size can show."""
    made_by = {t: op for op in ops for t in op.outputs}
    verdict = SizeVerdict.SAFE
    for op in ops:
        if op.kind != "MatMul":
            continue
        for port, t in enumerate(_layout_source(t, made_by) for t in op.inputs[:2]):
            tensor = backend.tensors[t]
            if t in made_by or tensor.sizes is None or tensor.strides is None \
                    or len(tensor.sizes) < 3:
                continue
            dims = list(zip(tensor.sizes, tensor.strides, strict=True))
            batch = [st for size, st in dims[:-2] if size > 1]
            (rows, row_stride), (cols, col_stride) = dims[-2:]
            if port == 0 and rows > 1 and cols > 1 and row_stride < col_stride \
                    and any(row_stride < st < col_stride for st in batch):
                return SizeVerdict.REFUSE
            inverted = any(inner > outer for outer, inner in zip(batch, batch[1:], strict=False))
            if inverted and (rows == 1 or cols == 1):
                return SizeVerdict.REFUSE
            if _batch_inside_the_matrix(dims):
                if inverted or _broadcasts_a_batch_dim(op, backend):
                    return SizeVerdict.REFUSE
                verdict = SizeVerdict.PIN
            if inverted:
                verdict = SizeVerdict.PIN
    return verdict


def _layout_source(t: int, made_by: dict[int, BackendOp]) -> int:
    """The tensor a matmul operand reads, past ops that keep its layout."""
    while t in made_by and made_by[t].kind in _LAYOUT_KEEPING:
        t = made_by[t].inputs[0]
    return t


def _batch_inside_the_matrix(dims: list[tuple[int, int]]) -> bool:
    """Whether a batch dim of size > 1 but the last has a smaller stride than a matrix dim
    of size > 1 (the last batch dim there is attention's heads)."""
    matrix_strides = [st for size, st in dims[-2:] if size > 1]
    return any(size > 1 and any(st < m for m in matrix_strides)
               for size, st in dims[:-3])


def _broadcasts_a_batch_dim(op: BackendOp, backend: BackendGraph) -> bool:
    """Whether a batched matmul's operands differ in a batch dim (one of them 1 there, or
    missing where the other is batched too); a 2-d operand (a linear's weight) is not."""
    shapes = [backend.tensors[t].sizes for t in op.inputs[:2]]
    if any(s is None or len(s) < 3 for s in shapes):
        return False
    a, b = (list(s[:-2]) for s in shapes)
    rank = max(len(a), len(b))
    return [1] * (rank - len(a)) + a != [1] * (rank - len(b)) + b


def flattened_matmul_broadcast(ops: list[BackendOp], backend: BackendGraph) -> SizeVerdict:
    """After a matmul of a batched input with a 2-d weight (a linear), a binary operand
    broadcast over a dim but the last, unless per output feature: oneDNN v3.2 flattened
    the batch dims and indexed it wrongly; 3.12 picks its reference kernel for it. REFUSE
    where the profiled sizes are that case. Where only other sizes would be, the group
    stays open to them: the kernel's compile at such a size finds the reference kernel and
    runs it unfused (a sweep of ranks 3 and 4, every dim of the operand 1 or not when
    profiled and when called: all eager-exact, 48 of the 64 called specs unfused), and a
    residual of the result's batch and length (every transformer's) stays fused at any."""
    def rank(t: int) -> int:
        return len(backend.tensors[t].sizes or [])

    if not any(op.kind == "MatMul" and rank(op.inputs[0]) >= 3 and rank(op.inputs[1]) == 2
               for op in ops):
        return SizeVerdict.SAFE
    produced = {t for op in ops for t in op.outputs}
    for op in ops:
        if op.kind not in BINARY_OPS:
            continue
        result = backend.tensors[op.outputs[0]].sizes or []
        for t in op.inputs:
            sizes = backend.tensors[t].sizes
            if t in produced or sizes is None:
                continue
            sizes = [1] * (len(result) - len(sizes)) + sizes
            if all(d == 1 for d in sizes[:-1]):
                continue  # per output feature, or one value
            if any(d == 1 and result[i] > 1 for i, d in enumerate(sizes[:-1])):
                return SizeVerdict.REFUSE
    return SizeVerdict.SAFE


def products_of_weights(ops: list[BackendOp], backend: BackendGraph) -> list[BackendOp]:
    """The matmuls of a partition that read a constant 2-d weight (through a dequantize or
    a cast), where it holds two or more (a gated MLP's three linears). oneDNN 3.12 runs such
    a partition with its general kernel (`larger_partition_kernel_t`), whose matmuls read
    the weights as given, row-major, where a partition of one product packs them once
    (BA16a64b) and runs 15-20% faster. Convolutions pack theirs in both kernels."""
    made_by = {t: op for op in ops for t in op.outputs}
    found = []
    for op in ops:
        if op.kind != "MatMul" or len(op.inputs) < 2:
            continue
        weight = backend.tensors[_layout_source(op.inputs[1], made_by)]
        if weight.constant and len(weight.sizes or []) == 2:
            found.append(op)
    return found if len(found) >= 2 else []
