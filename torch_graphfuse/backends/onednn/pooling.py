"""Pooling and the mean: ops that reduce windows or dims of their input."""

from __future__ import annotations

from .lowering import Lowering, Unsupported, lowering

# Why oneDNN's max pooling is right on finite inputs only (measured on oneDNN 3.12).
MAX_POOL_LOSES_NAN = "oneDNN's max pooling skips NaN and gives -FLT_MAX for -inf"


def _pool_lists(lo: Lowering, kernel: int, stride: int, padding: int) -> dict[str, list[int]]:
    spatial = lo.rank(0) - 2
    if spatial != 2:
        raise Unsupported(f"{spatial + 2}-d pooling input")

    def expand(values: list[int], name: str) -> list[int]:
        values = list(values) if isinstance(values, (list, tuple)) else [values]
        if len(values) == 1:
            values = values * spatial
        if len(values) != spatial:
            raise Unsupported(f"pool {name} rank mismatch")
        return values

    k = expand(lo.const(kernel), "kernel")
    s = lo.const(stride)
    s = k if not s else expand(s, "stride")
    p = expand(lo.const(padding), "padding")
    return {"kernel": k, "strides": s, "pads_begin": p, "pads_end": p}


def _pin_ceil_mode(lo: Lowering, lists: dict[str, list[int]], dilations: list[int]) -> None:
    """oneDNN sizes a ceil_mode pool without ATen's rule that the last window
    starts inside the input or its left padding: take it only where the two
    agree, and only at the profiled sizes."""
    ours = [-(-(n + 2 * p - (k - 1) * d - 1) // s) + 1 for n, k, s, p, d in zip(
        lo.sizes(0)[2:], lists["kernel"], lists["strides"], lists["pads_begin"], dilations,
        strict=True)]
    if ours != lo.out_sizes()[2:]:
        raise Unsupported("ceil_mode pool whose last window starts in the padding")
    lo.pin_shapes()


@lowering("aten::max_pool2d", worth_alone=True, finite_only=MAX_POOL_LOSES_NAN)
def max_pool(lo: Lowering) -> None:
    # (self, kernel_size, stride, padding, dilation, ceil_mode)
    lists = _pool_lists(lo, 1, 2, 3)
    dilation = lo.const(4)
    dilations = list(dilation) if isinstance(dilation, (list, tuple)) else [dilation]
    if len(dilations) == 1:
        dilations = dilations * len(lists["kernel"])
    if any(d != 1 for d in dilations):
        # A dilated window may miss the input wholly: eager's -inf, oneDNN's -FLT_MAX.
        raise Unsupported("dilated max pooling (a window may hold no input element)")
    ceil = bool(lo.const(5))
    if ceil:
        _pin_ceil_mode(lo, lists, dilations)
    lo.emit("MaxPool", [lo.input(0)], [lo.output()], **lists, dilations=dilations,
            rounding_type="ceil" if ceil else "floor", data_format="NCX")


@lowering("aten::avg_pool2d", worth_alone=True)
def avg_pool(lo: Lowering) -> None:
    # (self, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override?)
    if lo.n_inputs() > 6 and not lo.is_none(6):
        raise Unsupported("avg_pool with divisor_override")
    lists = _pool_lists(lo, 1, 2, 3)
    ceil, count_pad = bool(lo.const(4)), bool(lo.const(5))
    if ceil and count_pad:
        # torch's divisor for a window past the padded input differs from
        # oneDNN's; take it only where ceil and floor agree on the size.
        floor_sizes = [(n + 2 * p - k) // s + 1 for n, k, s, p in zip(
            lo.sizes(0)[2:], lists["kernel"], lists["strides"], lists["pads_begin"], strict=True)]
        if floor_sizes != lo.out_sizes()[2:]:
            raise Unsupported("avg_pool ceil_mode window past the padded input")
        lo.pin_shapes()
        ceil = False
    if ceil:
        _pin_ceil_mode(lo, lists, [1, 1])
    lo.emit("AvgPool", [lo.input(0)], [lo.output()], **lists, exclude_pad=not count_pad,
            rounding_type="ceil" if ceil else "floor", data_format="NCX")


@lowering("aten::adaptive_avg_pool2d", worth_alone=True, static_shapes=True)
def adaptive_avg_pool2d(lo: Lowering) -> None:
    # A plain pool when the output size divides the input size.
    size = lo.sizes(0)
    if len(size) != 4:
        raise Unsupported("adaptive_avg_pool2d of a non-4-d input")
    out = lo.out_sizes()
    if any(i % o for i, o in zip(size[2:], out[2:], strict=True)):
        raise Unsupported("adaptive pool whose output size does not divide the input")
    kernel = [i // o for i, o in zip(size[2:], out[2:], strict=True)]
    lo.emit("AvgPool", [lo.input(0)], [lo.output()], kernel=kernel, strides=kernel,
            pads_begin=[0, 0], pads_end=[0, 0], exclude_pad=False, rounding_type="floor",
            data_format="NCX")


def _innermost(sizes: list[int], strides: list[int], dims: list[int]) -> bool:
    """Whether `dims` lie inside the others in memory (size-1 dims aside)."""
    rank = len(sizes)
    reduced = {d % rank for d in dims if sizes[d % rank] != 1}
    kept = [d for d in range(rank) if sizes[d] != 1 and d not in reduced]
    return all(strides[r] < strides[k] for r in reduced for k in kept)


@lowering("aten::mean")
def mean(lo: Lowering) -> None:
    # mean.dim(self, dim, keepdim, dtype?). Not worth a group alone: ATen's mean is as
    # fast, and a SE block's spatial mean on its own cost a group call.
    if lo.n_inputs() < 3:
        raise Unsupported("mean over all elements")
    if lo.n_inputs() > 3 and not lo.is_none(3):
        raise Unsupported("mean with a dtype")
    dims = lo.const(1)
    if not dims:
        raise Unsupported("mean over all elements")
    x = lo.graph.tensors[lo.input(0)]
    if not x.sizes or not x.strides or not _innermost(x.sizes, x.strides, list(dims)):
        # Measured on oneDNN 3.12: ref:any for a mean over the spatial dims of a
        # channels-last tensor, or over any dim but the innermost.
        raise Unsupported("mean over dims that are not the innermost in memory (oneDNN "
                          "runs that with its reference implementation)")
    lo.emit("ReduceMean", [lo.input(0)], [lo.output()], axes=list(dims),
            keep_dims=bool(lo.const(2)))
