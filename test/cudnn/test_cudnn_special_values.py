"""The special-values sweep's parts that need no GPU: its comparison with eager counts
each kind of departure, and every group it sweeps is valid IR in both 16-bit types."""

from __future__ import annotations

import math

import pytest
import torch

from torch_graphfuse.backends.cudnn import ir, special_values


def test_compare_counts_each_kind_of_departure_from_eager() -> None:
    nan, inf = math.nan, math.inf
    want = torch.tensor([nan, nan, 1.0, inf, -inf, 2.0, 3.0])
    got = torch.tensor([nan, 0.0, nan, inf, inf, 2.001, 4.0])
    found = special_values.compare(got, want)
    assert found["nan_lost"] == 1
    assert found["nan_made"] == 1
    assert found["inf_differs"] == 1
    assert found["finite_differs"] == 1  # 4 against 3; 2.001 is within rounding
    assert found["largest_finite_error"] == pytest.approx(1.0)


def test_compare_finds_nothing_in_eagers_own_result() -> None:
    want = torch.tensor([math.nan, math.inf, -math.inf, 0.5], dtype=torch.float16)
    assert not any(special_values.compare(want.clone(), want).values())


@pytest.mark.parametrize("io", list(special_values.DTYPES))
@pytest.mark.parametrize("case", special_values.CASES, ids=lambda c: c.name)
def test_every_swept_group_is_valid_ir(case: special_values.Case, io: str) -> None:
    graph = case.graph(io)
    ir.validate(graph)
    assert len(graph.outputs) == 1
