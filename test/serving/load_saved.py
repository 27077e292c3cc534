"""Runs saved models in a process that never imports torch_graphfuse: only the runtime
library is loaded, as a libtorch program or Triton's PyTorch backend would.

    python load_saved.py RUNTIME_LIBRARY CASE.pt [CASE.pt ...]

Each CASE.pt (torch.save) holds {"model": path, "calls": [inputs, ...]}; the outputs of
each call and the kernel stats after the calls go to CASE.pt.out, as torch.save writes.
"""

from __future__ import annotations

import sys

import torch


def main() -> None:
    torch.ops.load_library(sys.argv[1])
    for case_path in sys.argv[2:]:
        case = torch.load(case_path)
        model = torch.jit.load(case["model"])
        torch.ops.graphfuse.reset_kernel_stats()
        with torch.no_grad():
            outputs = [model(*inputs) for inputs in case["calls"]]
        torch.save({"outputs": outputs, "stats": dict(torch.ops.graphfuse.kernel_stats()),
                    "imported": "torch_graphfuse" in sys.modules}, case_path + ".out")


if __name__ == "__main__":
    main()
