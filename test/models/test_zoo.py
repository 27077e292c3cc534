"""The zoo's small slice: each architecture of transformers, timm and torchvision, in small
configs, fused and compared with eager, fp32 and bf16 (autocast)."""

from __future__ import annotations

import copy

import pytest
import torch
from fusion_check import eager, fuse, run

import torch_graphfuse
from torch_graphfuse import last_report
from torch_graphfuse.backends.onednn import speed_trial
from torch_graphfuse.testing import runner, wider_zoo, zoo

pytestmark = pytest.mark.skipif(zoo.missing() is not None, reason=str(zoo.missing()))


def test_zoo_covers_the_families_users_deploy() -> None:
    families = {m.family.split(" (")[0] for m in zoo.MODELS.values()}
    assert len(zoo.MODELS) >= 25
    assert {"encoder", "decoder", "encoder-decoder", "vision transformer", "convnet",
            "mlp-mixer", "audio encoder"} <= families
    assert any("windowed" in m.family for m in zoo.MODELS.values())


@pytest.mark.parametrize("trials", ["measure", "fuse"])
@pytest.mark.parametrize("name", sorted(zoo.MODELS))
def test_zoo_model_fused_matches_eager_fp32(name: str, trials: str,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """As a speed trial decides on this CPU, and with every trial's mapping taken: a
    partition one CPU leaves with ATen is still checked on every CPU."""
    monkeypatch.setenv(speed_trial.ENV, trials)
    model, inputs = zoo.build(name, small=True)
    _, out, graph = fuse(model, inputs)
    error = zoo.relative_error(out, eager(model, inputs))
    assert error <= zoo.FP32_TOLERANCE, f"{name}: relative error {error:.2e}\n{last_report()}"
    assert runner.fusion_groups(graph), f"{name}: nothing fused\n{last_report()}"


def _allowed_error(model: torch.nn.Module, inputs: zoo.Inputs, dtype: str,
                   exact: torch.Tensor) -> float:
    """fp32: the zoo's tolerance; bf16: BF16_FACTOR times eager bf16's own error from fp32."""
    if dtype == "fp32":
        return zoo.FP32_TOLERANCE
    return zoo.BF16_FACTOR * zoo.relative_error(eager(model, inputs, dtype).float(), exact) + 1e-6


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
@pytest.mark.parametrize("name", sorted(zoo.MODELS))
def test_zoo_model_traced_at_one_size_serves_another(name: str, dtype: str) -> None:
    """Sequence lengths and batch sizes change in deployment: each group's guard and
    per-size compile (or its fallback) give eager's result at the new size, and again at
    the traced one after it."""
    model, inputs = zoo.build(name, small=True)
    module, _, _ = fuse(model, inputs, dtype)
    other = zoo.at_another_size(inputs)
    for call in (other, other, inputs):
        out = run(module, call, dtype)
        exact = eager(model, call)
        assert out.shape == exact.shape
        error = zoo.relative_error(out.float(), exact)
        bound = _allowed_error(model, call, dtype, exact)
        assert error <= bound, f"{name}: relative error {error:.2e} (at most {bound:.2e}) " \
            f"at sizes {[tuple(t.shape) for t in call]}\n{last_report()}"


@pytest.mark.parametrize("name", sorted(zoo.MODELS))
def test_zoo_model_fused_bf16_as_close_as_eager_bf16(name: str) -> None:
    model, inputs = zoo.build(name, small=True)
    _, out, _ = fuse(model, inputs, "bf16")
    exact = eager(model, inputs).float()
    error = zoo.relative_error(out.float(), exact)
    bound = _allowed_error(model, inputs, "bf16", exact)
    assert error <= bound, (
        f"{name}: {error:.2e} from fp32, at most {bound:.2e} ({zoo.BF16_FACTOR:g}x eager "
        f"bf16's)\n{last_report()}")
    assert out.dtype == eager(model, inputs, "bf16").dtype


def test_zoo_batch_norm_statistics_keep_eager_fp32_near_fp64() -> None:
    """The published efficientnetv2_rw_s, whose 15-block stage amplified rounding until eager
    fp32 was 9% from fp64 while its norms kept most of their initial statistics: a zoo
    model that ill-conditioned makes every peer look wrong against eager."""
    model, inputs = zoo.build("timm/efficientnetv2_rw_s", small=False)
    exact = copy.deepcopy(model).double()(*[t.double() for t in inputs])
    assert zoo.relative_error(eager(model, inputs).double(), exact) <= 1e-6


def test_wider_list_stands_apart_from_the_zoo_and_builds_through_it() -> None:
    """benchmarks/zoo.py --wider runs these outside CI; zoo.build serves both lists."""
    assert not set(wider_zoo.MODELS) & set(zoo.MODELS)
    assert len(wider_zoo.MODELS) >= 80
    assert all(name.split("/")[0] in ("hf", "timm", "tv") for name in wider_zoo.MODELS)
    model, inputs = zoo.build("timm/lcnet_050", small=True)  # its smallest: 2 MB of weights
    assert zoo.lookup("timm/lcnet_050").family.startswith("convnet")
    assert model(*inputs).shape == (1, 1000)


def test_projections_of_a_convolution_read_as_tokens_run_fused_at_every_call() -> None:
    """CvT reads each convolution's result as tokens through a transposed view; fused, that
    convolution writes it channels-last, so the projections' input is row-major after the
    profiling runs saw it transposed. A matmul's result is row-major either way: the
    projections stay fused (they had run unfused on every call: 0.91x frozen TorchScript)."""
    model, inputs = zoo.build("hf/cvt", small=True)
    module, _, _ = fuse(model, inputs)
    torch_graphfuse.reset_kernel_stats()
    out = run(module, inputs, "fp32")
    assert zoo.relative_error(out, eager(model, inputs)) <= zoo.FP32_TOLERANCE
    assert torch_graphfuse.kernel_stats()["unfused_specs"] == 0, last_report()
