"""nn.MultiheadAttention's and nn.TransformerEncoderLayer's inference fast paths, written out.

In eval mode without gradients (batch_first) those modules call one ATen op for the whole
block, `_native_multi_head_attention` or `_transformer_encoder_layer_fwd`, which no backend
maps: the projections, norms and feed-forward inside stay unfused. Written out as the
linears, views, scaled_dot_product_attention, layer norms and activations they compute,
the projections fuse with what surrounds them. Eager's op computes the same sums (checked
to 5e-7 against it, NaN positions alike); the head count and weights become constants, the
batch and sequence sizes stay read at run time.

Only the cases with no mask, and for the attention op no attention weights read, are
written out: the masks' kinds (`mask_type`) and the weights' averaging stay ATen's.
"""

from __future__ import annotations

import torch

from .graph_utils import insert_node


class _Typed:
    """Inserts aten nodes before `anchor`, each output typed as the op's result on zero
    tensors of its inputs' profiled types: the sizes and strides the profiler would record
    (a kernel chooses the strides: CPU attention returns heads merged in memory, where
    its meta function returns them apart)."""

    def __init__(self, graph: torch._C.Graph, anchor: torch._C.Node,
                 device: torch.device) -> None:
        self.graph, self.anchor, self.device = graph, anchor, device
        self.known: dict[int, object] = {}  # value id -> its sample tensor or int (list)

    def _sample(self, v: torch._C.Value | object) -> object:
        if not isinstance(v, torch._C.Value):
            return v
        if v.unique() in self.known:
            return self.known[v.unique()]
        if v.node().kind() == "prim::Constant":
            return v.toIValue()
        t = v.type()
        return torch.zeros_like(torch.empty_strided(t.sizes(), t.strides(), dtype=t.dtype(),
                                                    device=self.device))

    def op(self, kind: str, *inputs: torch._C.Value | object) -> torch._C.Value:
        """A `kind` node of `inputs` (those not graph values become constants)."""
        node = insert_node(self.graph, self.anchor, kind, list(inputs), torch._C.TensorType.get())
        # The sample run passes keyword-only arguments (add's alpha, gelu's approximate,
        # attention's scale) by name, as the schema the node matched says.
        args, kwargs = [], {}
        schema = torch._C.parse_schema(node.schema())
        for argument, value in zip(schema.arguments, inputs, strict=True):
            sample = self._sample(value)
            if argument.kwarg_only:
                kwargs[argument.name] = sample
            else:
                args.append(sample)
        result = getattr(torch.ops.aten, kind.split("::")[1])(*args, **kwargs)
        out = node.output()
        if isinstance(result, torch.Tensor):
            out.setType(torch._C.TensorType.create_from_tensor(result))
        else:
            out.setType(torch._C.IntType.get())
        self.known[out.unique()] = result
        return out

    def sizes(self, *items: torch._C.Value | int) -> torch._C.Value:
        out = insert_node(self.graph, self.anchor, "prim::ListConstruct", list(items),
                          torch._C.ListType.ofInts()).output()
        self.known[out.unique()] = [self._sample(v) for v in items]
        return out

    def layer_norm(self, x: torch._C.Value, width: int, weight: torch.Tensor,
                   bias: torch.Tensor, eps: float) -> torch._C.Value:
        return self.op("aten::layer_norm", x, [width], weight, bias, eps, True)


_CONTIGUOUS_FORMAT = 0  # torch.contiguous_format, as TorchScript graphs hold memory formats


def _complete(value: torch._C.Value, rank: int) -> bool:
    t = value.type()
    return (isinstance(t, torch._C.TensorType) and t.dim() == rank and t.dtype() is not None
            and t.device() is not None and None not in t.sizes()
            and t.strides() is not None and None not in t.strides())


def _constants(node: torch._C.Node, indices: range | tuple[int, ...],
               dtype: torch.dtype) -> list | None:
    """The node's inputs at `indices` as constants (tensors of `dtype`, as eager's op
    requires of its weights), or None if one is not."""
    values = []
    for i in indices:
        v = node.inputsAt(i)
        if v.node().kind() != "prim::Constant":
            return None
        value = v.toIValue()
        if isinstance(value, torch.Tensor) and value.dtype != dtype:
            return None
        values.append(value)
    return values


def _replace(old: torch._C.Value, new: torch._C.Value) -> None:
    """`new` for `old`, with old's profiled type where the profiler recorded one."""
    if _complete(old, 3):
        new.setType(old.type())
    old.replaceAllUsesWith(new)


def _attention(b: _Typed, x: torch._C.Value, width: int, heads: int,
               weights: list[torch.Tensor]) -> torch._C.Value:
    """Self-attention over x [batch, tokens, width]: the q, k and v projections (the
    packed weight's thirds), the heads' attention, their merge and the output projection."""
    qkv_weight, qkv_bias, proj_weight, proj_bias = weights
    batch = b.op("aten::size", x, 0)
    split = b.sizes(batch, -1, heads, width // heads)
    q, k, v = (b.op("aten::transpose", b.op("aten::view", b.op(
        "aten::linear", x, qkv_weight[i * width:(i + 1) * width],
        qkv_bias[i * width:(i + 1) * width]), split), 1, 2) for i in range(3))
    heads_out = b.op("aten::scaled_dot_product_attention", q, k, v, None, 0.0, False, None,
                     False)
    merged = b.op("aten::reshape", b.op("aten::contiguous", b.op(
        "aten::transpose", heads_out, 1, 2), _CONTIGUOUS_FORMAT), b.sizes(batch, -1, width))
    return b.op("aten::linear", merged, proj_weight, proj_bias)


def multi_head_attention(graph: torch._C.Graph, node: torch._C.Node) -> bool:
    # (query, key, value, embed_dim, num_head, qkv_weight, qkv_bias, proj_weight, proj_bias,
    #  mask, need_weights, average_attn_weights, mask_type) -> (out, weights)
    x = node.inputsAt(0)
    if not _complete(x, 3):
        return False
    self_attention = all(node.inputsAt(i).unique() == x.unique() for i in (1, 2))
    sizes = _constants(node, (3, 4), x.type().dtype())
    weights = _constants(node, range(5, 9), x.type().dtype())
    if (not self_attention or sizes is None or weights is None
            or not node.inputsAt(9).node().mustBeNone() or list(node.outputsAt(1).uses())):
        return False
    b = _Typed(graph, node, x.type().device())
    _replace(node.outputsAt(0), _attention(b, x, *sizes, weights))
    return True


def encoder_layer(graph: torch._C.Graph, node: torch._C.Node) -> bool:
    # (src, embed_dim, num_heads, qkv_weight, qkv_bias, proj_weight, proj_bias, use_gelu,
    #  norm_first, eps, norm_weight_1, norm_bias_1, norm_weight_2, norm_bias_2,
    #  ffn_weight_1, ffn_bias_1, ffn_weight_2, ffn_bias_2, mask, mask_type)
    x = node.inputsAt(0)
    if not _complete(x, 3):
        return False
    args = _constants(node, range(1, 18), x.type().dtype())
    if args is None or not node.inputsAt(18).node().mustBeNone():
        return False
    (width, heads, qkv_w, qkv_b, proj_w, proj_b, use_gelu, norm_first, eps,
     norm1_w, norm1_b, norm2_w, norm2_b, ffn1_w, ffn1_b, ffn2_w, ffn2_b) = args
    b = _Typed(graph, node, x.type().device())

    def feed_forward(t: torch._C.Value) -> torch._C.Value:
        hidden = b.op("aten::linear", t, ffn1_w, ffn1_b)
        hidden = b.op("aten::gelu", hidden, "none") if use_gelu else b.op("aten::relu", hidden)
        return b.op("aten::linear", hidden, ffn2_w, ffn2_b)

    def attention(t: torch._C.Value) -> torch._C.Value:
        return _attention(b, t, width, heads, [qkv_w, qkv_b, proj_w, proj_b])

    if norm_first:
        h = b.op("aten::add", x, attention(b.layer_norm(x, width, norm1_w, norm1_b, eps)), 1)
        out = b.op("aten::add", h, feed_forward(b.layer_norm(h, width, norm2_w, norm2_b, eps)),
                   1)
    else:
        h = b.layer_norm(b.op("aten::add", x, attention(x), 1), width, norm1_w, norm1_b, eps)
        out = b.layer_norm(b.op("aten::add", h, feed_forward(h), 1), width, norm2_w, norm2_b,
                           eps)
    _replace(node.output(), out)
    return True
