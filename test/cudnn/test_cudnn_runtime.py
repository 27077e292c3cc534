"""The runtime without CUDA (runtime.py): the input checks before a plan runs, the
executor factory and its counts, and CudnnExecutor's plans per device and TF32
setting, replaced where they fail to execute, refused where none runs, and probed
for NaN and infinities where the group assumes inputs finite. Plans come from a fake
compiler or stand in through the interpreter."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
from plan_fakes import FakeCompiler, conv_relu_ir, key_of, tf32_flags

from torch_graphfuse.backends.cudnn import interpreter, ir, runtime
from torch_graphfuse.backends.cudnn.plans import key as plan_key
from torch_graphfuse.backends.cudnn.plans.cache import Compiled, PlanCache
from torch_graphfuse.backends.cudnn.plans.key import tf32_allowed
from torch_graphfuse.backends.cudnn.plans.store import PlanStore


def specs_of(graph: ir.Graph) -> list[runtime.InputSpec]:
    return [runtime.InputSpec.of(graph.tensor(tid)) for tid in graph.inputs]


def test_inputs_on_the_cpu_are_refused() -> None:
    graph = conv_relu_ir()
    inputs = [torch.zeros(1, 8, 4, 4, dtype=torch.half), torch.zeros(8, 8, 3, 3, dtype=torch.half)]
    with pytest.raises(runtime.InputMismatch, match="cuDNN runs on CUDA"):
        runtime.check_inputs(specs_of(graph), inputs)


def test_wrong_input_count_is_refused() -> None:
    with pytest.raises(runtime.InputMismatch, match="takes 2 inputs, got 1"):
        runtime.check_inputs(specs_of(conv_relu_ir()), [torch.zeros(1, 8, 4, 4)])


def test_wrong_dtype_is_refused() -> None:
    spec = specs_of(conv_relu_ir())[0]
    with pytest.raises(runtime.InputMismatch, match="dtype torch.float32"):
        spec.check(torch.zeros(1, 8, 4, 4), 0)


def test_input_smaller_than_the_ir_reads_is_refused() -> None:
    spec = specs_of(conv_relu_ir())[0]
    with pytest.raises(runtime.InputMismatch, match="reach past"):
        spec.check(torch.zeros(1, 8, 4, 3, dtype=torch.half), 0)
    window = torch.zeros(2, 8, 4, 4, dtype=torch.half)[1:]  # its storage ends where it does
    spec.check(window, 0)
    with pytest.raises(runtime.InputMismatch, match="reach past"):
        spec.check(torch.zeros(128, dtype=torch.half)[8:], 0)  # aligned, 8 elements short


def test_misaligned_input_is_refused() -> None:
    spec = specs_of(conv_relu_ir())[0]
    shifted = torch.zeros(200, dtype=torch.half)[1:129]
    with pytest.raises(runtime.InputMismatch, match="aligned"):
        spec.check(shifted, 0)


def test_input_of_another_shape_with_the_memory_the_ir_reads_passes() -> None:
    """The kernel passes the graph's tensors; the IR may view them differently
    (a linear's (B, S, K) input as a (1, B*S, K) matmul operand)."""
    matmul_a = ir.Tensor(0, [1, 6, 4], [24, 4, 1], "bfloat16")
    runtime.InputSpec.of(matmul_a).check(torch.zeros(2, 3, 4, dtype=torch.bfloat16), 0)


def test_non_tensor_input_is_refused() -> None:
    with pytest.raises(runtime.InputMismatch, match="not a tensor"):
        specs_of(conv_relu_ir())[0].check(3.0, 0)


def test_malformed_description_fails_to_make_an_executor() -> None:
    runtime.reset()
    with pytest.raises(ValueError):
        runtime.group_executor('{"version": 99}')
    assert runtime.stats()["failures"] == 1


def test_swapped_factory_makes_the_executors_and_runs_are_counted() -> None:
    runtime.reset()
    made: list[str] = []

    def doubling(desc: str) -> runtime.Executor:
        made.append(desc)
        return lambda inputs: [inputs[0] * 2]

    def failing(desc: str) -> runtime.Executor:
        def run(inputs: Any) -> list[torch.Tensor]:
            raise RuntimeError("no plan")
        return run

    desc = conv_relu_ir().to_json()
    with runtime.executor_factory(doubling):
        run = runtime.group_executor(desc)
    assert made == [desc]
    assert torch.equal(run([torch.ones(3)])[0], torch.full((3,), 2.0))
    with runtime.executor_factory(failing):
        broken = runtime.group_executor(desc)
    with pytest.raises(RuntimeError, match="no plan"):
        broken([torch.ones(3)])
    stats = runtime.stats()
    assert (stats["executions"], stats["failures"]) == (1, 1)
    assert stats["plans_built"] == 0
    assert runtime.set_executor_factory(None) is runtime.CudnnExecutor


def test_cudnn_executor_refuses_cpu_inputs_before_touching_cudnn() -> None:
    graph = conv_relu_ir()
    run = runtime.CudnnExecutor(graph.to_json())
    with pytest.raises(runtime.InputMismatch, match="CUDA"):
        run([torch.zeros(1, 8, 4, 4, dtype=torch.half), torch.zeros(8, 8, 3, 3, dtype=torch.half)])


def executor_over(cache: PlanCache, monkeypatch: pytest.MonkeyPatch,
                  graph: ir.Graph | None = None) -> runtime.CudnnExecutor:
    """An executor of `graph` (conv_relu_ir's by default) that takes its plans from
    `cache`, keyed by key_of with TF32 as torch's flags say."""
    monkeypatch.setattr(runtime, "plan_cache", lambda: cache)
    monkeypatch.setattr(plan_key, "device_key",
                        lambda graph, index: key_of(graph, tf32=tf32_allowed(graph)))
    return runtime.CudnnExecutor((graph or conv_relu_ir()).to_json())


def test_group_cudnn_refuses_is_not_planned_again_on_every_run(
        store: PlanStore, monkeypatch: pytest.MonkeyPatch) -> None:
    class Refusing(FakeCompiler):
        def build(self, graph: ir.Graph, handle: Any, autotune: bool, tf32: bool,
                  failed_engines: frozenset[str] = frozenset()
                  ) -> tuple[Compiled, bytes | None]:
            self.builds += 1
            raise RuntimeError("no engine supports this graph")

    compiler = Refusing()
    executor = executor_over(PlanCache(compiler, store), monkeypatch)
    with pytest.raises(RuntimeError, match="no engine supports this graph"):
        executor.plan_for(0, None)
    with pytest.raises(RuntimeError, match="cuDNN has no plan for this group: .*no engine"):
        executor.plan_for(0, None)
    assert compiler.builds == 1


def test_executor_keeps_its_plan_per_device(store: PlanStore,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    cache = PlanCache(FakeCompiler(), store)
    executor = executor_over(cache, monkeypatch)
    _, first = executor.plan_for(0, None)
    assert executor.plan_for(0, None)[1] is first and cache.stats.memory_hits == 0
    assert executor.plan_for(1, None)[1] is not first
    assert first.uids == {0: 100, 1: 101, 3: 103}


def test_executor_plans_again_when_torch_tf32_flag_changes(
        store: PlanStore, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = PlanCache(FakeCompiler(), store)
    executor = executor_over(cache, monkeypatch, conv_relu_ir(dtype="float"))
    with tf32_flags(conv=False, matmul=False):
        key_ieee, ieee = executor.plan_for(0, None)
    with tf32_flags(conv=True, matmul=False):
        key_tf32, tf32 = executor.plan_for(0, None)
    assert (key_ieee.tf32, key_tf32.tf32) == (False, True) and tf32 is not ieee
    assert cache.compiler.last_build[0] is True  # type: ignore[attr-defined]


def test_a_plan_that_fails_to_execute_is_replaced_for_this_run_and_the_next(
        store: PlanStore, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = PlanCache(FakeCompiler(), store)
    executor = executor_over(cache, monkeypatch)
    key, first = executor.plan_for(0, None)

    def run(plan: Compiled) -> list[torch.Tensor]:
        if plan.engine == "eng0":
            raise RuntimeError("CUDNN_STATUS_EXECUTION_FAILED")
        return [torch.zeros(1)]

    assert executor.run_replacing(0, key, first, None, run) == [torch.zeros(1)]
    assert executor.plan_for(0, None)[1].engine == "eng1"
    assert cache.stats.plans_replaced == 1


def test_a_group_no_plan_runs_is_refused_instead_of_replanned_on_every_call(
        store: PlanStore, monkeypatch: pytest.MonkeyPatch) -> None:
    compiler = FakeCompiler()
    executor = executor_over(PlanCache(compiler, store), monkeypatch)
    key, first = executor.plan_for(0, None)

    def run(plan: Compiled) -> list[torch.Tensor]:
        raise RuntimeError(f"{plan.engine} fails")

    with pytest.raises(RuntimeError, match="eng3 fails"):
        executor.run_replacing(0, key, first, None, run)
    assert compiler.builds == 1 + runtime.CudnnExecutor.MAX_REPLACEMENTS
    with pytest.raises(RuntimeError, match="cuDNN has no plan for this group: .*eng3 fails"):
        executor.plan_for(0, None)
    assert compiler.builds == 1 + runtime.CudnnExecutor.MAX_REPLACEMENTS


# -- the C++ executor: which plans are offered to it, and when again ----------------------


def native_copies(monkeypatch: pytest.MonkeyPatch) -> list[Compiled]:
    """runtime.native_plan gives each plan's engine name as its "C++ copy"; the plans
    asked for, in order."""
    asked: list[Compiled] = []

    def copy(device_index: int, compiled: Compiled) -> str:
        asked.append(compiled)
        return f"native {compiled.engine} on {device_index}"
    monkeypatch.setattr(runtime, "native_plan", copy)
    return asked


def test_a_plan_that_ran_is_offered_to_the_cpp_executor_once(
        store: PlanStore, monkeypatch: pytest.MonkeyPatch) -> None:
    asked = native_copies(monkeypatch)
    executor = executor_over(PlanCache(FakeCompiler(), store), monkeypatch)
    assert executor.native_offer is None
    executor.plan_for(0, None)
    executor.offer_native(0, False, checks_inputs=False)
    # uids of the ports: inputs (ids 0, 1), then the output (id 3)
    assert executor.native_offer == (1, "native eng0 on 0", plan_key.TF32_NEVER, False,
                                     [100, 101, 103])
    executor.offer_native(0, False, checks_inputs=False)
    assert executor.native_offer[0] == 1 and len(asked) == 1


def test_a_replaced_plan_is_offered_under_a_new_generation(
        store: PlanStore, monkeypatch: pytest.MonkeyPatch) -> None:
    native_copies(monkeypatch)
    executor = executor_over(PlanCache(FakeCompiler(), store), monkeypatch)
    key, first = executor.plan_for(0, None)
    executor.offer_native(0, False, checks_inputs=False)

    def run(plan: Compiled) -> list[torch.Tensor]:
        if plan.engine == "eng0":
            raise RuntimeError("CUDNN_STATUS_EXECUTION_FAILED")
        return [torch.zeros(1)]

    executor.run_replacing(0, key, first, None, run)
    executor.offer_native(0, False, checks_inputs=False)
    assert executor.native_offer is not None
    assert executor.native_offer[:2] == (2, "native eng1 on 0")


def test_an_fp32_plan_is_offered_with_the_tf32_flag_it_was_chosen_under(
        store: PlanStore, monkeypatch: pytest.MonkeyPatch) -> None:
    native_copies(monkeypatch)
    executor = executor_over(PlanCache(FakeCompiler(), store), monkeypatch,
                             conv_relu_ir(dtype="float"))
    with tf32_flags(conv=True, matmul=False):
        executor.plan_for(0, None)
        executor.offer_native(0, True, checks_inputs=False)
    assert executor.native_offer is not None
    assert executor.native_offer[2:4] == (plan_key.TF32_CUDNN_FLAG, True)
    with tf32_flags(conv=False, matmul=False):
        executor.plan_for(0, None)
        executor.offer_native(0, False, checks_inputs=False)
    assert executor.native_offer[:4] == (2, "native eng0 on 0", plan_key.TF32_CUDNN_FLAG, False)


def test_a_plan_that_may_need_the_per_run_finite_check_is_not_offered(
        store: PlanStore, monkeypatch: pytest.MonkeyPatch) -> None:
    native_copies(monkeypatch)
    executor = executor_over(PlanCache(FakeCompiler(), store), monkeypatch)
    _, compiled = executor.plan_for(0, None)
    compiled.keeps_special_values = False
    executor.offer_native(0, False, checks_inputs=True)
    assert executor.native_offer is None
    kept = executor_over(PlanCache(FakeCompiler(), store), monkeypatch)
    _, compiled = kept.plan_for(0, None)
    compiled.keeps_special_values = True
    kept.offer_native(0, False, checks_inputs=True)
    assert kept.native_offer is not None


def test_a_plan_without_a_cpp_copy_withdraws_the_offer(
        store: PlanStore, monkeypatch: pytest.MonkeyPatch) -> None:
    native_copies(monkeypatch)
    executor = executor_over(PlanCache(FakeCompiler(), store), monkeypatch)
    executor.plan_for(0, None)
    executor.offer_native(0, False, checks_inputs=False)
    monkeypatch.setattr(runtime, "native_plan", lambda device_index, compiled: None)
    executor.plan_for(1, None)
    executor.offer_native(1, False, checks_inputs=False)
    assert executor.native_offer is None


def test_this_build_runs_cudnn_groups_through_python_unless_it_has_the_cpp_executor(
        monkeypatch: pytest.MonkeyPatch) -> None:
    if hasattr(runtime._C, "CudnnNativeRunner"):
        pytest.skip("this extension has the C++ executor")
    monkeypatch.setenv(runtime.NATIVE_ENV, "1")
    compiled = Compiled(graph=None, uids={}, workspace_size=0, autotuned=False)
    assert not runtime.native_available() and not runtime.native_enabled()
    assert runtime.native_plan(0, compiled) is None and compiled.native is False
    assert runtime.stats()["native_runs"] == 0


def test_cudnn_groups_get_the_cpp_runner_only_when_asked_and_usable(
        monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[tuple[Any, ...]] = []

    class Runner:
        def __init__(self, *args: Any) -> None:
            made.append(args)

    usable = [True]
    monkeypatch.setattr(runtime._C, "CudnnNativeRunner", Runner, raising=False)
    monkeypatch.setattr(runtime._C, "_uses_shared_libstdcxx", lambda: usable[0])
    graph = conv_relu_ir()
    monkeypatch.delenv(runtime.NATIVE_ENV, raising=False)
    assert not isinstance(runtime.group_executor(graph.to_json()), Runner)
    monkeypatch.setenv(runtime.NATIVE_ENV, "1")
    assert isinstance(runtime.group_executor(graph.to_json()), Runner)
    run, executor, inputs, outputs = made[0]
    assert isinstance(executor, runtime.CudnnExecutor) and executor.offers_native and callable(run)
    assert inputs == [([1, 8, 4, 4], [128, 1, 32, 8], torch.half),
                      ([8, 8, 3, 3], [72, 1, 24, 8], torch.half)]
    assert outputs == [([1, 8, 4, 4], [128, 1, 32, 8], torch.half)]
    with runtime.executor_factory(lambda desc: lambda inputs: []):
        assert not isinstance(runtime.group_executor(graph.to_json()), Runner)
    # a libstdc++ linked into the extension statically: the runner would crash
    usable[0] = False
    assert not isinstance(runtime.group_executor(graph.to_json()), Runner)
    assert len(made) == 1


# -- inputs assumed finite: checked per run only where the plan differs from eager ---------


class InterpretedPlan:
    """A pygraph stand-in that computes the group with the interpreter, on the CPU; with
    `loses_nan`, as an epilogue computing relu with fmaxf would (NaN becomes 0)."""

    def __init__(self, graph: ir.Graph, uids: dict[int, int], loses_nan: bool) -> None:
        self.graph, self.uids, self.loses_nan = graph, uids, loses_nan
        self.executions = 0

    def execute(self, pack: dict[int, torch.Tensor], workspace: Any, handle: Any) -> None:
        self.executions += 1
        inputs = [pack[self.uids[tid]] for tid in self.graph.inputs]
        for tid, value in zip(self.graph.outputs, interpreter.run(self.graph, inputs),
                              strict=True):
            pack[self.uids[tid]].copy_(value.nan_to_num(nan=0.0, posinf=math.inf,
                                                        neginf=-math.inf)
                                       if self.loses_nan else value)


def interpreted(graph: ir.Graph, loses_nan: bool) -> tuple[runtime.CudnnExecutor, Compiled]:
    uids = {tid: 100 + tid for tid in (*graph.inputs, *graph.outputs)}
    plan = InterpretedPlan(graph, uids, loses_nan)
    return runtime.CudnnExecutor(graph.to_json()), Compiled(plan, uids, 0, False, "eng0")


def conv_relu_ports(graph: ir.Graph, nan: bool = False) -> list[torch.Tensor]:
    specs = [graph.tensor(t) for t in graph.inputs]
    ports = [torch.empty_strided(s.dims, s.strides, dtype=torch.half).copy_(torch.randn(s.dims))
             for s in specs]
    if nan:
        ports[0][0, 0, 1, 1] = math.nan
    return ports


def test_a_plan_keeping_nan_and_infinities_runs_inputs_assumed_finite_unchecked() -> None:
    graph = conv_relu_ir()
    executor, plan = interpreted(graph, loses_nan=False)
    nan_input = conv_relu_ports(graph, nan=True)
    cpu = torch.device("cpu")
    assert executor._admits(plan, nan_input, [nan_input[0]], cpu, None)
    assert plan.keeps_special_values is True
    assert plan.graph.executions == 1  # the probe, once per plan
    assert executor._admits(plan, nan_input, [nan_input[0]], cpu, None)
    assert plan.graph.executions == 1


def test_a_plan_losing_nan_runs_only_inputs_checked_finite() -> None:
    graph = conv_relu_ir()
    executor, plan = interpreted(graph, loses_nan=True)
    finite, nan_input = conv_relu_ports(graph), conv_relu_ports(graph, nan=True)
    cpu = torch.device("cpu")
    assert not executor._admits(plan, nan_input, [nan_input[0]], cpu, None)
    assert plan.keeps_special_values is False
    assert executor._admits(plan, finite, [finite[0]], cpu, None)
    assert plan.graph.executions == 1


def test_a_float_relu_group_is_never_probed_and_runs_only_inputs_checked_finite() -> None:
    # relu(+inf) is FLT_MAX where cuDNN computes in float: no probe can clear that.
    graph = conv_relu_ir(dtype="float")
    executor, plan = interpreted(graph, loses_nan=False)
    specs = [graph.tensor(t) for t in graph.inputs]
    finite = [torch.empty_strided(t.dims, t.strides).copy_(torch.randn(t.dims)) for t in specs]
    inf_input = [x.clone() for x in finite]
    inf_input[0][0, 0, 1, 1] = math.inf
    cpu = torch.device("cpu")
    assert not executor._admits(plan, inf_input, [inf_input[0]], cpu, None)
    assert executor._admits(plan, finite, [finite[0]], cpu, None)
    assert plan.keeps_special_values is False and plan.graph.executions == 0


def test_a_group_assuming_nothing_finite_is_never_probed() -> None:
    graph = conv_relu_ir()
    executor, plan = interpreted(graph, loses_nan=True)
    nan_input = conv_relu_ports(graph, nan=True)
    assert executor._admits(plan, nan_input, [], torch.device("cpu"), None)
    assert plan.keeps_special_values is None and plan.graph.executions == 0
