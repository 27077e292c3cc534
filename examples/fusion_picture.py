"""Draw what torch_graphfuse fused in the demo's ResNet-50 (plain torch.nn, random
weights): docs/fusion_resnet50.svg with Graphviz's `dot`, docs/fusion_resnet50.txt
where it is missing; the DOT text goes to docs/fusion_resnet50.dot either way.

    scripts/picture.sh [--out docs/fusion_resnet50.svg] [--size 224]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

import torch_graphfuse
from torch_graphfuse.testing import runner
from torch_graphfuse.testing.models import resnet50

DEFAULT_OUT = Path(__file__).resolve().parents[1] / "docs" / "fusion_resnet50.svg"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT,
                        help="picture to write (.svg, .png, .pdf, .dot or .txt)")
    parser.add_argument("--size", type=int, default=224, help="input height and width")
    args = parser.parse_args()

    torch.manual_seed(0)
    runner.fused(resnet50().eval(), [torch.randn(1, 3, args.size, args.size)])
    report = torch_graphfuse.last_report()
    assert report is not None, "torch_graphfuse optimized no graph"
    print(report)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    written = report.picture(args.out)
    if written.suffix == ".txt" and args.out.suffix != ".txt":
        print("Graphviz's dot is not installed: the picture is in its text form")
    print(f"wrote {written} (DOT text: {args.out.with_suffix('.dot')})")


if __name__ == "__main__":
    main()
