"""bench-baselines' page states only timings its own results hold.

Its page once printed "One FedAvg round ... took 2.8 s on an idle core" and per-method cost
ratios from a constant (``COST``, commit 00439e4) as if each run had measured them.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import bench_baselines  # noqa: E402  (a script folder, not a package)


def fake_results() -> dict:
    """A results payload of two timed methods (30 s and 90 s for 10 rounds) and derived FedAvg."""
    row = {"top1_mean": 0.5, "top1_std": 0.1, "ece_mean": 0.1, "mce_mean": 0.2, "rounds": 10,
           "diverged": 0}
    rows = {"fedavg": {**row, "seconds": 0.0}, "fedavg_ft": {**row, "seconds": 30.0},
            "pfedme": {**row, "seconds": 90.0}}
    return {"rounds": 10, "threads": 1, "command": "cd benchmarks && python bench_baselines.py",
            "rows": rows, "reruns": {}, "table": bench_baselines.table(rows)}


def test_the_page_prints_each_methods_time_per_round_from_its_own_run():
    text = bench_baselines.page(fake_results(), "tiny", "twonn-50")

    timing = text.split("Wall time per round of each method's own run")[1].split("\n")[0]
    assert "FedAvg+FT 3.00 s" in timing and "pFedMe 9.00 s" in timing
    assert "FedAvg " not in timing.replace("FedAvg+FT", "")  # derived row: no run of its own
    assert "idle core" not in text
    seconds = {float(s) for s in re.findall(r"(\d+(?:\.\d+)?) s\b", text)}
    assert seconds == {3.0, 9.0}  # no other time on the page
    assert "5.9" not in text and "2.8" not in text  # COST's pFedMe and its FedAvg round


def test_a_page_without_timed_rows_states_no_cost():
    results = fake_results()
    results["rows"] = {m: {**r, "seconds": 0.0} for m, r in results["rows"].items()}

    text = bench_baselines.page(results, "tiny", "twonn-50")

    assert "Wall time" not in text and re.findall(r"\d s\b", text) == []
