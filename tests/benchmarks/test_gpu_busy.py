"""bench-scale's GPU busy share: nvidia-smi's samples of the rounds' window, averaged."""

import sys
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from gpu_busy import mean_utilization  # noqa: E402  (a script folder, not a package)

START, END = datetime(2026, 11, 27, 14, 0, 0), datetime(2026, 11, 27, 14, 0, 4)


def test_only_samples_after_the_settling_second_and_before_the_end_count():
    lines = ["2026/11/27 14:00:00.500, 0",  # its period reaches back before the rounds
             "2026/11/27 14:00:01.200, 80", "2026/11/27 14:00:02.200, 60",
             "[N/A], [N/A]", "",  # not samples
             "2026/11/27 14:00:03.900, 70", "2026/11/27 14:00:04.300, 0"]  # after the rounds
    assert abs(mean_utilization(lines, START, END) - 0.70) < 1e-12


def test_no_sample_in_the_window_gives_none():
    assert mean_utilization(["2026/11/27 14:00:00.100, 50"], START, END) is None
