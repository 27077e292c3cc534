"""benchmarks/gpu_bench.py on any machine: its command line, its report's cells, and the
protocol by which each peer runs in a child process and hands back one result line. What it
measures needs a GPU (scripts/gpu_test.sh --bench)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from benchmark_modules import BENCHMARKS, load

SCRIPT = BENCHMARKS / "gpu_bench.py"

bench = load("gpu_bench")
children = load("harness.children")
gpu_peers = load("harness.gpu.peers")
gpu_report = load("harness.gpu.report")
gpu_timing = load("harness.gpu.timing")


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True,
                          timeout=120)


def _parse(stdout: str) -> object:
    """What the parent reads from a child's output."""
    return children.parse_output(stdout, gpu_timing.Measurement)


def _run_child(command: list[str], timeout_s: float) -> object:
    return children.run_child(command, timeout_s, gpu_timing.Measurement)


def _python(code: str) -> list[str]:
    """A stand-in child: a Python one-off instead of gpu_bench.py --one."""
    return [sys.executable, "-c", textwrap.dedent(code)]


# -- the command line -------------------------------------------------------------------------


def test_help_describes_itself_without_the_child_option() -> None:
    done = _run("--help")
    assert done.returncode == 0, done.stderr
    for option in ("--quick", "--models", "--dtypes", "--batches", "--peers", "--timeout"):
        assert option in done.stdout
    assert "max_autotune" in done.stdout and "process of its own" in done.stdout
    assert "--one" not in done.stdout  # the parent's business, not the user's


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message shown without CUDA")
def test_without_cuda_it_says_so_in_one_line() -> None:
    done = _run("--quick")
    assert done.returncode != 0
    assert "needs a CUDA GPU" in done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize(("args", "message"), [
    (["--peers", "eager,fast"], "unknown peers: fast"),
    (["--models", "resnet50,vit"], "unknown models or dtypes: vit"),
    (["--batches", "1,0"], "--batches takes positive integers"),
    (["--batches", "one"], "--batches takes positive integers"),
])
def test_bad_filters_are_refused_before_anything_runs(args: list[str], message: str) -> None:
    done = _run(*args)
    assert done.returncode != 0
    assert message in done.stderr and "Traceback" not in done.stderr


def test_configs_run_model_by_model_then_dtype_then_batch() -> None:
    todo = bench.configs(["resnet50", "bert"], ["fp16", "bf16"], [1, 32], quick=False)
    assert [c.label for c in todo] == [
        "ResNet-50 224 NHWC b1 fp16", "ResNet-50 224 NHWC b32 fp16",
        "ResNet-50 224 NHWC b1 bf16", "ResNet-50 224 NHWC b32 bf16",
        "BERT-base s128 b1 fp16", "BERT-base s128 b32 fp16",
        "BERT-base s128 b1 bf16", "BERT-base s128 b32 bf16"]
    assert todo[0].workload.memory_format == torch.channels_last
    assert todo[4].workload.memory_format == torch.contiguous_format
    assert bench._batches(None, quick=True) == [1] and bench._batches(None, quick=False) == [1, 32]


def test_a_job_spec_reads_back_as_its_config_and_peer() -> None:
    config = bench.configs(["bert"], ["bf16"], [32], quick=True)[0]
    peer = gpu_peers.PEERS_BY_KEY["max_autotune"]
    spec = bench.job_spec(config, peer)
    assert spec == "bert,bf16,32,max_autotune"
    assert bench.parse_spec(spec, quick=True) == (config, peer)
    assert bench.parse_spec(spec, quick=False)[0].workload.name == "BERT-base s128"
    with pytest.raises(SystemExit, match="--one takes MODEL,DTYPE,BATCH,PEER"):
        bench.parse_spec("bert,bf16,32,fast", quick=True)
    with pytest.raises(SystemExit, match="--one takes"):
        bench.parse_spec("bert,bf16,32", quick=True)


# -- the report -------------------------------------------------------------------------------


def _measurement(latency_ms: float, throughput: float, note: str = "") -> object:
    return gpu_timing.Measurement(latency_ms, throughput, 12.34, 2e-3, note)


def _runs() -> dict[object, dict[str, object]]:
    """ResNet with max-autotune failed (a "|" in its reason), BERT with the plugin failed."""
    resnet, bert = bench.configs(["resnet50", "bert"], ["fp16"], [1], quick=True)
    return {
        resnet: {"eager": _measurement(2.0, 500.0), "compile": _measurement(1.0, 1000.0),
                 "max_autotune": "RuntimeError: a | b",
                 "script": _measurement(1.6, 625.0),
                 "graphfuse": _measurement(0.5, 2000.0, "3 cuDNN groups, 3 plans built")},
        bert: {"eager": _measurement(1.0, 1000.0), "compile": _measurement(1.0, 1000.0),
               "max_autotune": _measurement(1.0, 1000.0), "script": _measurement(1.0, 1000.0),
               "graphfuse": "timed out after 1800 s"},
    }


def test_latency_table_gives_each_peer_and_the_plugins_speedups() -> None:
    table = gpu_report.metric_table(_runs(), gpu_peers.PEERS, gpu_report.LATENCY)
    assert table[0] == (
        "| model | batch | dtype | eager | torch.compile | torch.compile "
        "max-autotune-no-cudagraphs | TorchScript (frozen) | torch_graphfuse (cuDNN) | "
        "torch_graphfuse vs eager | torch_graphfuse vs compile | torch_graphfuse vs "
        "max-autotune | torch_graphfuse vs TorchScript |")
    assert table[1] == "|" + " --- |" * 12
    assert table[2] == ("| ResNet-18 112 NHWC | 1 | fp16 | 2.000 | 1.000 | "
                        "failed: RuntimeError: a \\| b | 1.600 | 0.500 | "
                        "4.00x | 2.00x | - | 3.20x |")
    assert table[3] == ("| BERT layer s128 | 1 | fp16 | 1.000 | 1.000 | 1.000 | 1.000 | "
                        "failed: timed out after 1800 s | - | - | - | - |")


def test_throughput_speedups_divide_the_other_way() -> None:
    table = gpu_report.metric_table(_runs(), gpu_peers.PEERS, gpu_report.THROUGHPUT)
    assert table[2] == ("| ResNet-18 112 NHWC | 1 | fp16 | 500 | 1000 | "
                        "failed: RuntimeError: a \\| b | 625 | 2000 | "
                        "4.00x | 2.00x | - | 3.20x |")


def test_without_the_plugin_there_are_no_speedup_columns() -> None:
    peers = [gpu_peers.PEERS_BY_KEY["eager"], gpu_peers.PEERS_BY_KEY["compile"]]
    table = gpu_report.metric_table(_runs(), peers, gpu_report.LATENCY)
    assert table[0] == "| model | batch | dtype | eager | torch.compile |"
    assert table[2] == "| ResNet-18 112 NHWC | 1 | fp16 | 2.000 | 1.000 |"


def test_a_long_failure_is_cut_before_its_bar_is_escaped() -> None:
    cell = gpu_report.cell("x" * 59 + "|tail", lambda m: "")
    assert cell == "failed: " + "x" * 59 + "\\|"
    assert gpu_report.cell(None, lambda m: "") == "-"


def test_first_calls_notes_and_failures() -> None:
    runs = _runs()
    first = gpu_report.first_call_table(runs, gpu_peers.PEERS)
    assert first[2] == ("| ResNet-18 112 NHWC | 1 | fp16 | 12.3 s, 2.0e-03 | 12.3 s, 2.0e-03 | "
                        "failed: RuntimeError: a \\| b | 12.3 s, 2.0e-03 | 12.3 s, 2.0e-03 |")
    assert gpu_report.note_lines(runs) == [
        "- ResNet-18 112 NHWC b1 fp16: 3 cuDNN groups, 3 plans built"]
    assert gpu_report.failure_lines(runs, gpu_peers.PEERS) == [
        "- ResNet-18 112 NHWC b1 fp16, torch.compile max-autotune-no-cudagraphs: "
        "RuntimeError: a | b",
        "- BERT layer s128 b1 fp16, torch_graphfuse (cuDNN): timed out after 1800 s"]


def test_report_has_the_header_tables_and_failures() -> None:
    text = gpu_report.report(_runs(), gpu_peers.PEERS, "GPU: H100, torch x",
                             "python gpu_bench.py", False)
    assert text.startswith("# torch_graphfuse GPU benchmark\n\nGPU: H100, torch x  \n")
    for section in ("## Latency (ms)", "## Throughput (samples/s)", "## Failures"):
        assert section in text
    assert "| ResNet-18 112 NHWC | 1 | fp16 | 500 | 1000 |" in text
    clean = {config: results for config, results in _runs().items()
             if config.model == "resnet50"}
    clean[next(iter(clean))]["max_autotune"] = _measurement(1.0, 1000.0)
    quick = gpu_report.report(clean, gpu_peers.PEERS, "GPU", "cmd", True)
    assert "(quick smoke run)" in quick and "## Failures" not in quick


def test_plot_needs_eager_to_plot_against(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    assert gpu_report.plot(_runs(), gpu_peers.PEERS, tmp_path / "all.png", "GPU")
    assert (tmp_path / "all.png").stat().st_size > 0
    without_eager = [p for p in gpu_peers.PEERS if p.key != "eager"]
    assert not gpu_report.plot(_runs(), without_eager, tmp_path / "none.png", "GPU")
    assert not (tmp_path / "none.png").exists()


def test_host_time_per_group_run_averages_the_profilers_group_events_only() -> None:
    def event(key: str, count: int, cpu_us: float) -> SimpleNamespace:
        return SimpleNamespace(key=key, count=count, cpu_time_total=cpu_us)

    events = [event("graphfuse::FusionGroup_1 [linear, add]", 10, 400.0),
              event("graphfuse::FusionGroup_2 [_convolution, relu]", 30, 2000.0),
              event("aten::addmm", 120, 9000.0)]
    assert gpu_timing.host_us_per_group_run(events) == 60.0
    assert gpu_timing.host_us_per_group_run(events[2:]) is None


def test_cudnn_versions_read_as_major_minor_patch() -> None:
    assert gpu_report.cudnn_version(91002) == "9.10.2"
    assert gpu_report.cudnn_version(90800) == "9.8.0"


# -- the child protocol -----------------------------------------------------------------------


def test_a_result_line_reads_back_among_other_output() -> None:
    measured = gpu_timing.Measurement(1.5, 640.0, 3.0, 1e-3, "2 cuDNN groups")
    out = f"compiling\n{children.RESULT_MARKER}{children.encode(measured)}\nbye\n"
    assert _parse(out) == measured
    failed = children.RESULT_MARKER + children.encode("OutOfMemoryError: CUDA out of memory")
    assert _parse("noise\n" + failed) == "OutOfMemoryError: CUDA out of memory"
    assert _parse("no result here\n") is None
    garbled = _parse(children.RESULT_MARKER + '{"latency_ms": 1')
    assert isinstance(garbled, str) and garbled.startswith("unreadable result line")
    wrong_fields = _parse(children.RESULT_MARKER + '{"ms": 1}')
    assert isinstance(wrong_fields, str) and wrong_fields.startswith("unreadable result line")


def test_a_result_printed_before_a_crash_in_teardown_counts() -> None:
    line = children.RESULT_MARKER + children.encode(gpu_timing.Measurement(1.0, 2.0, 3.0, 0.0))
    result = _run_child(_python(f"""
        import os
        print("warming up")
        print({line!r}, flush=True)
        os._exit(3)
    """), timeout_s=60)
    assert result == gpu_timing.Measurement(1.0, 2.0, 3.0, 0.0)


@pytest.mark.parametrize(("code", "reason"), [
    ("raise RuntimeError('boom')", "exit code 1: RuntimeError: boom"),
    ("import os; os.abort()", "killed by SIGABRT, no result line"),
    ("print('no marker')", "exit code 0, no result line"),
])
def test_a_child_without_a_result_line_is_a_failure_saying_why(code: str, reason: str) -> None:
    assert _run_child(_python(code), timeout_s=60) == reason


def _gone(pid: int) -> bool:
    """Exited: no such process, or a zombie nobody has reaped yet."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"


def test_a_child_past_its_timeout_is_killed_with_what_it_started(tmp_path: Path) -> None:
    pid_file = tmp_path / "grandchild"
    start = time.perf_counter()
    result = _run_child(_python(f"""
        import subprocess, sys, time
        worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
        open({str(pid_file)!r}, "w").write(str(worker.pid))
        time.sleep(120)
    """), timeout_s=3)
    assert result == "timed out after 3 s"
    assert time.perf_counter() - start < 30
    grandchild = int(pid_file.read_text())
    deadline = time.perf_counter() + 10
    while not _gone(grandchild) and time.perf_counter() < deadline:
        time.sleep(0.1)
    assert _gone(grandchild)


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a child that fails for lack of CUDA")
def test_the_real_child_reports_its_failure_on_its_result_line() -> None:
    config = bench.configs(["bert"], ["fp16"], [1], quick=True)[0]
    command = bench.child_command(config, gpu_peers.PEERS_BY_KEY["eager"], quick=True)
    assert command[-3:] == ["--one", "bert,fp16,1,eager", "--quick"]
    result = _run_child(command, timeout_s=120)
    # Caught in the child and sent as its result, not a crash the parent had to diagnose.
    assert isinstance(result, str) and "CUDA" in result
    assert not result.startswith(("exit code", "killed by", "timed out"))
