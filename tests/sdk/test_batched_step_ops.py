"""A batched SuPerFed step runs few ops: a GPU step replayed as a CUDA graph costs ~2-4 us a
kernel, whatever its size (issue 22). Counted on the CPU by benchmarks/step_ops.py."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import step_ops  # noqa: E402  (a script folder, not a package)


# per step, measured: 559 / 633 aten ops and 80 / 81 kernels (814 and 129 each before one
# flat mixing lerp, the unmasked nll and the regularizer's fewer scalar ops)
@pytest.mark.parametrize(("name", "aten", "kernels"), [("superfed_mm", 580, 84),
                                                        ("superfed_lm", 660, 85)])
def test_a_batched_superfed_step_runs_at_most_its_measured_ops(name, aten, kernels):
    counts = step_ops.per_step(name)
    assert sum(counts["aten"].values()) <= aten, counts["aten"]
    assert sum(counts["kernels"].values()) <= kernels, counts["kernels"]
