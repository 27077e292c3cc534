"""decompose: addmm with alpha or beta, and convolutions with padding "same" or "valid",
become ops the backends fuse, with eager's result; addmm's out= form keeps its write, and a
"same" padding ATen splits unevenly stays ATen's."""

from __future__ import annotations

import pytest
import torch
from fusion_check import check, eager, fuse, run

import torch_graphfuse


class ScaledAddmm(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(8, 8))
        self.bias = torch.nn.Parameter(torch.randn(8))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(torch.addmm(self.bias, x, self.weight, beta=2.0, alpha=0.5))


class AddmmOut(ScaledAddmm):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.zeros(x.shape[0], 8)
        torch.addmm(self.bias, x, self.weight, beta=2.0, alpha=0.5, out=y)
        return y + 1


def test_scaled_addmm_fuses_with_eagers_result() -> None:
    model, x = ScaledAddmm().eval(), torch.randn(4, 8)
    module, _, _ = fuse(model, [x])
    assert "aten::mm" in [k for g in torch_graphfuse.last_report().groups for k in g]
    torch.testing.assert_close(run(module, [x]), eager(model, [x]), rtol=1e-6, atol=1e-6)


def test_addmm_into_an_out_tensor_keeps_the_write() -> None:
    model, x = AddmmOut().eval(), torch.randn(4, 8)
    module = torch.jit.freeze(torch.jit.script(model))
    with torch_graphfuse.fuser(), torch.no_grad():
        for _ in range(3):
            out = module(x)
        expected = model(x)
    torch.testing.assert_close(out, expected, rtol=1e-6, atol=1e-6)


class PaddedByName(torch.nn.Module):
    """ConvMixer's depthwise 9x9 (padding="same"), a "valid" one, and a dilated 1-d
    "same" (TorchScript records them as `_convolution_mode`)."""

    def __init__(self) -> None:
        super().__init__()
        self.depthwise = torch.nn.Conv2d(8, 8, 9, padding="same", groups=8)
        self.valid = torch.nn.Conv2d(8, 8, 3, padding="valid")
        self.dilated = torch.nn.Conv1d(8, 8, 3, padding="same", dilation=2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.nn.functional.gelu(self.depthwise(x)) + x
        return self.dilated(torch.relu(self.valid(y)).flatten(2))


class FunctionalSame(torch.nn.Module):
    def __init__(self, kernel: int) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(8, 8, kernel, kernel))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(torch.nn.functional.conv2d(x, self.weight, padding="same"))


def test_convolutions_padded_by_name_fuse_with_eagers_result() -> None:
    check(PaddedByName(), [torch.randn(1, 8, 20, 20)], groups=3, left=[])


@pytest.mark.parametrize("kernel", [3, 5])
def test_functional_same_padding_fuses(kernel: int) -> None:
    check(FunctionalSame(kernel), [torch.randn(2, 8, 11, 13)], groups=1, left=[])


@pytest.mark.filterwarnings("ignore:Using padding='same' with even kernel")
def test_same_padding_split_unevenly_stays_atens() -> None:
    # A 4-tap kernel pads 1 before and 2 after: ATen pads a copy of the input first.
    check(FunctionalSame(4), [torch.randn(1, 8, 10, 10)],
          left=["aten::_convolution_mode", "aten::relu"])


class SameConvBatchNorm(torch.nn.Module):
    """Hugging Face EfficientNet's depthwise unit: conv(padding="same"), BatchNorm, SiLU."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(16, 16, 3, padding="same", groups=16, bias=False)
        self.norm = torch.nn.BatchNorm2d(16)
        with torch.no_grad():
            self.norm.running_mean.uniform_(-1, 1)
            self.norm.running_var.uniform_(0.5, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.silu(self.norm(self.conv(x)))


def test_same_padding_convolution_takes_the_batch_norm_into_its_weights() -> None:
    # Left beside the convolution, oneDNN 3.12 ran the normalization of this group with its
    # reference binary kernel, and every call ran unfused.
    model, x = SameConvBatchNorm(), torch.randn(1, 16, 14, 14)
    check(model, [x], groups=1, left=[])
    assert "batch_norm" not in torch_graphfuse.last_report().groups[0]
    module, _, _ = fuse(model, [x])
    torch_graphfuse.reset_kernel_stats()
    run(module, [x])
    assert torch_graphfuse.kernel_stats()["fallbacks"] == 0


class ValidConvMinusParameter(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(6, 12, (3, 5), (2, 1), "valid", (1, 2), 3)
        self.shift = torch.nn.Parameter(torch.randn(1, 1, 1, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sub(self.conv(x), self.shift, alpha=0.5)


def test_padded_by_name_convolution_minus_a_float32_tensor_stays_float32_under_autocast() -> None:
    # Found by the fuzzer: freezing's sum fold put the float32 shift into the bf16
    # convolution's bias, and the result came out bf16 where eager promotes to float32.
    check(ValidConvMinusParameter(), [torch.randn(1, 6, 7, 9)], dtype="bf16", left=None)


class EinsumAttention(torch.nn.Module):
    """CvT's attention: scores and weighted values as einsum, and forms left as they are."""

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        scores = torch.einsum("bhlk,bhtk->bhlt", q, k) * 0.25
        out = torch.einsum("bhlt,bhtv->bhlv", scores.softmax(-1), v)
        # Not batched matrix products: a sum over two labels, and an outer product.
        other = torch.einsum("bhlk,bhlk->bh", q, k)[..., None, None]
        outer = torch.einsum("bhl,bht->bhlt", q[..., 0], k[..., 0])
        return out + other + outer.sum(-1, keepdim=True)


@pytest.mark.parametrize("layout", ["contiguous", "transposed"])
def test_einsum_of_a_batched_matrix_product_becomes_matmul(layout: str) -> None:
    q, k, v = (torch.randn(2, 3, 16, 8) for _ in range(3))
    if layout == "transposed":  # a key stored as the heads' permute of a projection
        k = torch.randn(2, 16, 3, 8).transpose(1, 2)
    model = EinsumAttention()
    _, out, graph = fuse(model, [q, k, v])
    torch.testing.assert_close(out, eager(model, [q, k, v]), rtol=1e-5, atol=1e-5)
    kinds = [k for g in torch_graphfuse.last_report().groups for k in g]
    assert kinds.count("aten::matmul") == 2, graph
    left = [n.kind() for n in graph.nodes() if n.kind() == "aten::einsum"]
    assert left == ["aten::einsum", "aten::einsum"], graph


class BroadcastContraction(torch.nn.Module):
    """einsum broadcasts a contracted dim of size 1 (here t: 2 against 1), which matmul
    refuses."""

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.einsum("bhlt,bhtv->bhlv", a, b)


def test_einsum_broadcasting_its_contracted_dim_stays_einsum() -> None:
    a, b = torch.randn(3, 4, 2, 2), torch.randn(3, 4, 1, 2)
    model = BroadcastContraction()
    _, out, graph = fuse(model, [a, b])
    torch.testing.assert_close(out, eager(model, [a, b]))
    assert [n.kind() for n in graph.nodes() if n.kind() == "aten::einsum"] == ["aten::einsum"]


class ContractionThatBroadcastsLater(torch.nn.Module):
    """Scores whose key dim comes from a constant (4) against values whose token count is
    the input's: equal in the profiling runs (4 tokens), 4 against 1 at one token, where
    einsum broadcasts."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("keys", torch.randn(1, 4))

    def forward(self, scores: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return torch.einsum("bhlt,bhtv->bhlv", scores + self.keys, v.transpose(1, 2))


@pytest.mark.xfail(strict=True, raises=RuntimeError, reason=(
    "decompose's matmul raises where the contracted dims come apart after the profiling "
    "runs; expanding both at each call split CvT's attention partition, so the fix "
    "needs a lowering of einsum itself"))
def test_einsum_whose_contracted_dims_come_apart_after_profiling() -> None:
    model = ContractionThatBroadcastsLater()
    module, _, _ = fuse(model, [torch.randn(2, 4, 2, 1), torch.randn(2, 4, 1, 2)])
    scores, v = torch.randn(2, 1, 2, 1), torch.randn(2, 1, 1, 2)
    torch.testing.assert_close(run(module, [scores, v]), eager(model, [scores, v]))
