"""Serving without Python: a model torch_graphfuse.export saved, run by a libtorch program
(examples/cpp/serve), beside the same model as frozen TorchScript in C++ (with and without
torch's own oneDNN fuser, LLGA) and beside the Python paths.

Every run is a fresh process, as a server starting up is:
- "first result": from before loading the file (C++, or Python's torch.jit.load with only
  the runtime library loaded) to the first call's output. For today's Python path, from
  the model object to its first fused output: trace, freeze, the profiling runs.
- "steady state": the median of the requests after a warm-up.
The peers run interleaved, round after round; each cell is the median over rounds.

Writes RESULTS_serving.md and serving.png.

    python benchmarks/serving.py [--models tv/resnet50,hf/bert] [--rounds R]
                                 [--requests N] [--small] [--out benchmarks]

A child run (--child KIND --dir D) measures one Python peer and prints its JSON.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import torch
from harness import plots
from harness.cli import command_line, zoo_models
from harness.cpu.report import machine
from harness.text import progress, table, utc_now

import torch_graphfuse
from torch_graphfuse.testing import cpp_examples, zoo

DEFAULT_MODELS = "tv/resnet50,hf/bert,hf/gpt2,timm/convnext_tiny"
# (key, what it is, how it runs)
PEERS = [
    ("cpp", "torch_graphfuse saved, C++", "serve"),
    ("cpp_ts", "frozen TorchScript, C++", "serve"),
    ("cpp_llga", "frozen TorchScript + LLGA, C++", "serve --llga"),
    ("py_saved", "torch_graphfuse saved, Python (jit.load + runtime)", "child"),
    ("py_path", "torch_graphfuse in Python (trace, freeze, profile)", "child"),
]


def prepare(name: str, small: bool, folder: Path) -> dict[str, Any]:
    """The model's files: exported, frozen, its inputs, and the zoo entry to build again."""
    model, inputs = zoo.build(name, small=small)
    inputs = tuple(inputs)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.jit.save(torch_graphfuse.export(model, inputs), str(folder / "graphfuse.pt"))
        torch.jit.save(torch.jit.freeze(torch.jit.trace(model.eval(), inputs)),
                       str(folder / "frozen.pt"))
    torch.save(list(inputs), str(folder / "inputs.pt"))
    return {"name": name, "small": small}


def last_json_line(command: list[str]) -> dict[str, float] | str:
    """The JSON a fresh process prints on its last line, or why it printed none."""
    done = subprocess.run(command, capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        return f"exit {done.returncode}: {done.stderr.strip()[-200:]}"
    return json.loads(done.stdout.strip().splitlines()[-1])


def run_serve(programs: Path, folder: Path, model_file: str, flags: list[str],
              requests: int) -> dict[str, float] | str:
    return last_json_line([str(programs / "serve"), str(folder / model_file),
                           str(folder / "inputs.pt"), "--json", "--requests", str(requests),
                           *flags])


def run_child(kind: str, folder: Path, requests: int) -> dict[str, float] | str:
    return last_json_line([sys.executable, __file__, "--child", kind, "--dir", str(folder),
                           "--requests", str(requests)])


def child(kind: str, folder: Path, requests: int) -> dict[str, float]:
    """One Python peer, in this fresh process: time to first result, then the median."""
    inputs = tuple(torch.load(str(folder / "inputs.pt")))
    if kind == "py_saved":
        start = time.perf_counter()
        torch.ops.load_library(torch_graphfuse.runtime_library())
        model = torch.jit.load(str(folder / "graphfuse.pt"))
        with torch.inference_mode():
            model(*inputs)
    else:
        spec = json.loads((folder / "spec.json").read_text())
        built, _ = zoo.build(spec["name"], small=spec["small"])
        start = time.perf_counter()
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model = torch.jit.freeze(torch.jit.trace(built.eval(), inputs))
            torch_graphfuse.enable()
            for _ in range(torch._C._jit_get_num_profiled_runs() + 1):
                model(*inputs)
    first_ms = (time.perf_counter() - start) * 1e3
    times = []
    with torch.inference_mode() if kind == "py_saved" else torch.no_grad():
        for _ in range(5):
            model(*inputs)
        for _ in range(requests):
            at = time.perf_counter()
            model(*inputs)
            times.append((time.perf_counter() - at) * 1e3)
    stats = torch_graphfuse.kernel_stats()
    return {"first_ms": first_ms, "median_ms": statistics.median(times),
            "fused_runs": stats["fused_runs"], "fallbacks": stats["fallbacks"]}


def measure(name: str, small: bool, programs: Path, rounds: int,
            requests: int) -> dict[str, dict[str, float] | str]:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        spec = prepare(name, small, folder)
        (folder / "spec.json").write_text(json.dumps(spec))
        samples: dict[str, list[dict[str, float]]] = {key: [] for key, _, _ in PEERS}
        failures: dict[str, str] = {}
        for r in range(rounds):
            for key, _, how in PEERS:
                if key in failures:
                    continue
                if how == "child":
                    result = run_child(key, folder, requests)
                else:
                    model_file = "graphfuse.pt" if key == "cpp" else "frozen.pt"
                    result = run_serve(programs, folder, model_file, how.split()[1:], requests)
                if isinstance(result, str):
                    failures[key] = result
                else:
                    samples[key].append(result)
            progress(f"{name}: round {r + 1} of {rounds}")
    summary: dict[str, dict[str, float] | str] = {}
    for key, _, _ in PEERS:
        if key in failures:
            summary[key] = failures[key]
            continue
        runs = samples[key]
        summary[key] = {field: statistics.median(run[field] for run in runs)
                        for field in runs[0]}
    return summary


def report(results: dict[str, dict[str, dict[str, float] | str]], args: argparse.Namespace) -> str:
    lines = ["# Serving without Python: first result and steady state", "",
             f"{utc_now()}, {machine()}, torch "
             f"{torch.__version__}, oneDNN {torch_graphfuse.onednn_info()['version']}.", "",
             f"`{command_line()}`", "",
             "Each cell is the median over rounds of fresh processes, peers interleaved. "
             "First result: load and first call (C++ and the saved file in Python), or trace, "
             "freeze and the profiling runs (today's Python path). Steady state: the median "
             f"request of {args.requests} after 5 more.", ""]

    def cell(result: dict[str, float] | str, field: str) -> str:
        return "failed" if isinstance(result, str) else f"{result[field]:.1f}"

    for field, title in (("first_ms", "First result, ms"), ("median_ms", "Steady state, ms")):
        lines += [f"## {title}", ""]
        rows = [[name, *(cell(r[key], field) for key, _, _ in PEERS)]
                for name, r in results.items()]
        lines += table(["model", *(label for _, label, _ in PEERS)], rows) + [""]
    lines += ["## Against the targets", ""]
    rows = []
    for name, r in results.items():
        cpp, ts, path, saved = r["cpp"], r["cpp_ts"], r["py_path"], r["py_saved"]
        if any(isinstance(x, str) for x in (cpp, ts, path, saved)):
            rows.append([name, "-", "-", "-", "-"])
            continue
        rows.append([name,
                     f"{cpp['median_ms'] / path['median_ms']:.3f}x",
                     f"{cpp['first_ms'] / ts['first_ms']:.2f}x",
                     f"{cpp['first_ms'] / path['first_ms']:.2f}x",
                     f"{saved['first_ms'] / cpp['first_ms']:.2f}x"])
    lines += table(["model", "C++ steady / Python path (target <= 1.03)",
                    "C++ first / TorchScript C++ first (<= 1.5)",
                    "C++ first / Python path warm-up (<= 0.5)",
                    "Python saved first / C++ first (~1)"], rows) + [""]
    failed = [(name, key, r[key]) for name, r in results.items() for key, _, _ in PEERS
              if isinstance(r[key], str)]
    if failed:
        lines += ["## Failures", ""] + [f"- {name}, {key}: {why}" for name, key, why in failed]
    return "\n".join(lines) + "\n"


def plot(results: dict[str, dict[str, dict[str, float] | str]], path: Path) -> None:
    plt = plots.pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(12, 4))
    names = list(results)
    for ax, field, title in ((axes[0], "first_ms", "first result (ms, log)"),
                             (axes[1], "median_ms", "steady state (ms)")):
        width = 0.8 / len(PEERS)
        for i, (key, label, _) in enumerate(PEERS):
            values = [r[key][field] if isinstance(r[key], dict) else 0.0
                      for r in results.values()]
            offset = (i - (len(PEERS) - 1) / 2) * width
            ax.bar([x + offset for x in range(len(values))], values, width, label=label)
        plots.x_labels(ax, names, 0, 8)
        ax.set_title(title)
        if field == "first_ms":
            ax.set_yscale("log")
    axes[0].legend(fontsize=7)
    plots.save(fig, path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=zoo_models, default=zoo_models(DEFAULT_MODELS))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--requests", type=int, default=20)
    parser.add_argument("--small", action="store_true")
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent)
    parser.add_argument("--child", choices=["py_saved", "py_path"])
    parser.add_argument("--dir", type=Path)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.dir, args.requests)))
        return
    if why := cpp_examples.missing() or zoo.missing():
        sys.exit(f"serving: {why}")
    programs = cpp_examples.build()
    results = {name: measure(name, args.small, programs, args.rounds, args.requests)
               for name in args.models}
    suffix = "-quick" if args.small else ""
    (args.out / f"RESULTS_serving{suffix}.md").write_text(report(results, args))
    plot(results, args.out / f"serving{suffix}.png")
    progress(f"wrote {args.out / f'RESULTS_serving{suffix}.md'}")


if __name__ == "__main__":
    main()
