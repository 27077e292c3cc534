"""Sizes that change from call to call (serving traffic): a new length or batch compiles the
group's partition for it, from its description, with no fusing again through the pipeline;
values computed from sizes alone are computed once per size; every size gives eager's
results."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import torch
import torch.nn.functional as F
from torch import nn

import torch_graphfuse
from torch_graphfuse.testing import runner


class EncoderLayer(nn.Module):
    """A Hugging Face encoder layer as tracing records it: heads viewed with the sizes of the
    hidden states, SDPA, heads merged, projection with a residual, layer norm, and learned
    positions for the length read at run time."""

    def __init__(self, width: int = 32, heads: int = 4) -> None:
        super().__init__()
        self.heads = heads
        self.positions = nn.Embedding(64, width)
        self.q, self.k, self.v = (nn.Linear(width, width) for _ in range(3))
        self.out = nn.Linear(width, width)
        self.norm = nn.LayerNorm(width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.positions(torch.arange(x.size(1)))
        batch, length = x.size(0), x.size(1)

        def split(t: torch.Tensor) -> torch.Tensor:
            return t.view(batch, length, self.heads, -1).transpose(1, 2)

        a = F.scaled_dot_product_attention(split(self.q(x)), split(self.k(x)), split(self.v(x)))
        a = a.transpose(1, 2).reshape(batch, length, -1)
        return self.norm(self.out(a) + x)


def test_new_lengths_and_batches_compile_without_fusing_again() -> None:
    model = EncoderLayer().eval()
    module, _, graph = runner.fused(model, [torch.randn(1, 16, 32)])
    pinned = [g.s("label") for g in runner.fusion_groups(graph)
              if g.i("static_shapes") and g.s("backend") == "onednn"]
    assert pinned == []
    torch_graphfuse.reset_kernel_stats()
    with torch.no_grad(), torch_graphfuse.fuser():
        for batch, length in ((1, 9), (2, 23), (1, 9), (3, 16)):
            x = torch.randn(batch, length, 32)
            torch.testing.assert_close(module(x), model(x), rtol=1e-4, atol=1e-5)
    stats = torch_graphfuse.kernel_stats()
    assert stats["respecialized_runs"] == 0
    assert stats["compiles"] > 0 and stats["compile_us"] > 0
    # Only the positions, computed from the length alone, run unfused: once per new length.
    assert stats["fallbacks"] == 3


def test_repeated_layers_share_each_compile_and_keep_their_own_weights() -> None:
    # Three layers of one structure and their own weights: at each size the second and
    # third layers' groups take the partitions the first one's compiled, and every layer
    # still computes with its own weights.
    model = nn.Sequential(*[EncoderLayer() for _ in range(3)]).eval()
    module, _, graph = runner.fused(model, [torch.randn(1, 16, 32)])
    groups = [g for g in runner.fusion_groups(graph) if g.s("backend") == "onednn"]
    torch_graphfuse.reset_kernel_stats()
    with torch.no_grad(), torch_graphfuse.fuser():
        for batch, length in ((2, 23), (1, 9), (2, 23)):
            x = torch.randn(batch, length, 32)
            torch.testing.assert_close(module(x), model(x), rtol=1e-4, atol=1e-5)
    stats = torch_graphfuse.kernel_stats()
    assert stats["compiles"] == 2 * len(groups)  # per new size, each group once
    # At each size, the layers after the first take most of their compiles from the first's.
    assert stats["shared_compiles"] >= stats["compiles"] // 2


def test_a_size_constant_group_computes_each_new_length_once() -> None:
    class Positions(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.table = nn.Embedding(64, 8)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x * 2.0 + self.table(torch.arange(x.size(1)))

    model = Positions().eval()
    module, _, graph = runner.fused(model, [torch.randn(1, 16, 8)])
    assert "constant" in [g.s("backend") for g in runner.fusion_groups(graph)]
    torch_graphfuse.reset_kernel_stats()
    with torch.no_grad(), torch_graphfuse.fuser():
        for length in (5, 5, 7, 5, 7):
            x = torch.randn(1, length, 8)
            torch.testing.assert_close(module(x), model(x))
    stats = torch_graphfuse.kernel_stats()
    assert stats["respecialized_runs"] == 0
    assert stats["fallbacks"] == 2  # the first call at 5 and at 7


def test_a_new_spec_runs_unfused_until_its_compile_at_th_call() -> None:
    # By default (and in this suite) a new spec compiles at its first call;
    # TORCH_GRAPHFUSE_COMPILE_AT=2 waits for the second, so a size that never repeats
    # pays no compile.
    code = textwrap.dedent("""
        import json, torch, torch_graphfuse
        from torch import nn
        from torch_graphfuse.testing import runner
        m = nn.Sequential(nn.Linear(16, 16), nn.ReLU()).eval()
        mod = runner.freeze(m, [torch.randn(4, 16)])
        seen = []
        with torch.no_grad(), torch_graphfuse.fuser():
            for b in (4, 4, 4, 7, 7, 7):
                torch_graphfuse.reset_kernel_stats()
                x = torch.randn(b, 16)
                torch.testing.assert_close(mod(x), m(x))
                seen.append(torch_graphfuse.kernel_stats())
        print(json.dumps(seen))
    """)
    env = {**os.environ, "TORCH_GRAPHFUSE_COMPILE_AT": "2"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, timeout=300, check=True)
    at_7 = json.loads(done.stdout.strip().splitlines()[-1])[3:]
    assert at_7[0]["unseen_spec_runs"] == 1 and at_7[0]["compiles"] == 0
    assert at_7[1]["compiles"] == 1 and at_7[1]["fused_runs"] == 1
    assert at_7[2]["compiles"] == 0 and at_7[2]["cache_hits"] == 1
