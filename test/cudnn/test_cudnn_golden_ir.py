"""Golden IR of every grouping pattern of the catalog (test/cudnn/patterns.py), one
test each in test_cudnn_golden_ir_conv.py and test_cudnn_golden_ir_matmul.py: every
such pattern has one, its lines read back as the partition's IR, and lowering gives
the same IR every time."""

from __future__ import annotations

import pytest
import test_cudnn_golden_ir_conv
import test_cudnn_golden_ir_matmul
from golden_ir import lines, parsed
from lowered_patterns import lowered
from patterns import PATTERNS

# Patterns that group and refuse nothing (a refusal's group repeats one of them).
GOLDEN = [name for name, p in PATTERNS.items() if p.groups and not p.refusal]
GOLDEN_TESTS = (test_cudnn_golden_ir_conv.TestConvGoldenIR,
                test_cudnn_golden_ir_matmul.TestMatmulGoldenIR)


@pytest.mark.parametrize("name", GOLDEN)
def test_golden_lines_round_trip_to_the_partitions_ir(name: str) -> None:
    for graph_ir in lowered(PATTERNS[name]):
        assert parsed(lines(graph_ir)) == graph_ir


@pytest.mark.parametrize("name", GOLDEN)
def test_every_grouping_pattern_has_a_golden(name: str) -> None:
    assert any(hasattr(tests, f"test_{name}") for tests in GOLDEN_TESTS)


def test_lowering_twice_gives_the_same_ir() -> None:
    pattern = PATTERNS["bn_relu_prologue_conv_relu_half"]
    assert [g.to_json() for g in lowered(pattern)] == [g.to_json() for g in lowered(pattern)]
