"""Demo: a ResNet-50 (plain torch.nn, random weights) traced, frozen and fused by
torch_graphfuse; prints latency against eager and unfused TorchScript, and the
largest difference from eager.

    scripts/demo.sh [--batch 1] [--iters 20]
"""

from __future__ import annotations

import argparse
import time

import torch

import torch_graphfuse
from torch_graphfuse.testing import runner
from torch_graphfuse.testing.models import resnet50


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--iters", type=int, default=20)
    args = parser.parse_args()

    torch.manual_seed(0)
    model = resnet50().eval()
    x = torch.randn(args.batch, 3, 224, 224)
    onednn = torch_graphfuse.onednn_info()
    print(f"ResNet-50, batch {args.batch}, 224x224, fp32, {torch.get_num_threads()} threads, "
          f"torch {torch.__version__} with its oneDNN {onednn['version'] or '(unavailable)'}, "
          f"kernels for {onednn['isa']}")

    with torch.no_grad():
        reference = model(x)
        rows = [("eager", runner.median_ms(lambda: model(x), iters=args.iters), 0.0, None)]
        for name, enabled in (("TorchScript (frozen, no fuser)", False),
                              ("torch_graphfuse", True)):
            start = time.perf_counter()
            module, out, graph = runner.fused(model, [x], enabled)
            first = (time.perf_counter() - start) * 1e3
            diff = (out - reference).abs().max().item()
            ms = runner.median_ms(lambda m=module: m(x), iters=args.iters)
            rows.append((name, ms, diff, first))
            if enabled:
                groups = runner.fusion_groups(graph)
                left = sorted(set(runner.unfused_kinds(graph)))
                print(f"fusion groups: {len(groups)}; aten ops left outside: {left or 'none'}")

    eager_ms = rows[0][1]
    print(f"\n{'':32} {'median ms':>10} {'speedup':>8} {'max |diff|':>11} {'trace+profile ms':>17}")
    for name, ms, diff, first in rows:
        first_text = f"{first:17.0f}" if first is not None else f"{'':17}"
        print(f"{name:32} {ms:10.2f} {eager_ms / ms:7.2f}x {diff:11.2e} {first_text}")
    script_ms, fused_ms = rows[1][1], rows[2][1]
    print(f"\ntorch_graphfuse is {script_ms / fused_ms:.2f}x faster than unfused TorchScript")


if __name__ == "__main__":
    main()
