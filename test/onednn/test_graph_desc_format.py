"""The oneDNN description is a file format (a saved model keeps it): it names its format
and version on its first line, the runtime reads that version only, and the descriptions
of a few patterns are pinned line for line. A change to what they hold is a change to the
format: give it a new version, which files of the old one then run unfused."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import torch_graphfuse
from torch_graphfuse.backends.onednn.graph_desc import FORMAT, VERSION
from torch_graphfuse.testing import runner

GOLDEN = {
    "linear_gelu_linear": [
        "graphfuse-desc 1\n"
        "t 1 f32 v 2 4 16 s 16 1\nt 2 f32 c 1 32 s 1\nt 3 f32 c 2 32 16 s 16 1\n"
        "t 10 f32 v 2 4 32 s 32 1\nt 12 f32 v 2 4 32 s 32 1\n"
        "o 0 MatMul 3 1 3 2 1 10 1 transpose_b b 1 1\n"
        "o 1 GELU 1 10 1 12 1 mode s 1 gelu_erf\n"
        "in 1 3 2\nout 12\n",
        "graphfuse-desc 1\n"
        "t 4 f32 c 1 8 s 1\nt 5 f32 c 2 8 32 s 32 1\nt 12 f32 v 2 4 32 s 32 1\n"
        "t 16 f32 v 2 4 8 s 8 1\n"
        "o 2 MatMul 3 12 5 4 1 16 1 transpose_b b 1 1\n"
        "in 12 5 4\nout 16\n"],
    "conv_bn_relu": [
        "graphfuse-desc 1\n"
        "t 1 f32 v 4 1 3 8 8 s 192 64 8 1\nt 2 f32 c 1 8 s 1\nt 3 f32 c 4 8 3 3 3 s 27 9 3 1\n"
        "t 12 f32 v 4 1 8 8 8 s 512 64 8 1\nt 14 f32 v 4 1 8 8 8 s 512 64 8 1\n"
        "o 0 Convolution 3 1 3 2 1 12 7 strides I 2 1 1 pads_begin I 2 1 1 pads_end I 2 1 1 "
        "dilations I 2 1 1 groups i 1 1 data_format s 1 NCX weights_format s 1 OIX\n"
        "o 1 ReLU 1 12 1 14 0\n"
        "in 1 3 2\nout 14\n"],
    "layer_norm": [
        "graphfuse-desc 1\n"
        "t 1 f32 v 3 2 4 16 s 64 16 1\nt 2 f32 c 1 16 s 1\nt 3 f32 c 1 16 s 1\n"
        "t 10 f32 v 3 2 4 16 s 64 16 1\n"
        "o 0 LayerNorm 3 1 3 2 1 10 4 begin_norm_axis i 1 -1 epsilon f 1 1e-05 "
        "keep_stats b 1 0 use_affine b 1 1\n"
        "in 1 3 2\nout 10\n"],
}


def pattern(name: str) -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    if name == "linear_gelu_linear":
        return nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 8)), (torch.randn(4, 16),)
    if name == "conv_bn_relu":
        return (nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU()),
                (torch.randn(1, 3, 8, 8),))
    return nn.Sequential(nn.LayerNorm(16)), (torch.randn(2, 4, 16),)


def descriptions(name: str) -> list[str]:
    model, inputs = pattern(name)
    _, _, graph = runner.fused(model.eval(), inputs, True)
    return [group.s("desc") for group in runner.fusion_groups(graph)]


@pytest.mark.parametrize("name", GOLDEN)
def test_descriptions_match_their_golden(name: str) -> None:
    assert descriptions(name) == GOLDEN[name]


def test_a_description_names_its_format_and_version_first() -> None:
    for text in descriptions("linear_gelu_linear"):
        assert text.splitlines()[0] == f"{FORMAT} {VERSION}"


def test_the_runtime_compiles_the_golden_descriptions() -> None:
    for texts in GOLDEN.values():
        for text in texts:
            assert torch_graphfuse._C._partition(text)[0]


def test_the_runtime_refuses_another_version_with_the_reason() -> None:
    text = GOLDEN["layer_norm"][0].replace(f"{FORMAT} {VERSION}", f"{FORMAT} {VERSION + 1}")
    with pytest.raises(ValueError, match=f"format version {VERSION + 1}, this runtime reads "
                                           f"{VERSION}"):
        torch_graphfuse._C._partition(text)
