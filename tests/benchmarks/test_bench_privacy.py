"""bench-privacy's code path at a tiny setting: every method, with and without DP, one round."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

from pflkit.sdk.privacy_accounting import calibrate_noise

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import bench_privacy  # noqa: E402  (a script folder, not a package)

TINY = bench_privacy.Setting(rounds=1, clients=6, per_round=3, eval_clients=4,
                             epsilons=(3.0, math.inf), dataset="digits", out="tiny")


def test_tiny_run_writes_every_row_table_and_plot(tmp_path, monkeypatch):
    monkeypatch.setattr(bench_privacy, "RUNS", tmp_path / "runs")
    rows = bench_privacy.bench(TINY, tmp_path)

    by = {(r["method"], r["epsilon"]): r for r in rows}
    assert set(by) == {(m, e) for m in bench_privacy.LABELS for e in TINY.epsilons}
    z = calibrate_noise(3.0, bench_privacy.DELTA, 1, 3, 6)
    for method in bench_privacy.LABELS:
        noisy, plain = by[method, 3.0], by[method, math.inf]
        assert noisy["noise_multiplier"] == pytest.approx(z)
        assert noisy["epsilon_spent"] == pytest.approx(3.0, abs=0.05)
        assert plain["noise_multiplier"] is None and plain["epsilon_spent"] is None
        assert noisy["evaluated_clients"] == plain["evaluated_clients"] == 4
        assert noisy["rounds"] == 1
    # FedAvg+FT's and PFL-MFE's shared model is FedAvg's: the same training, noise included
    for eps in TINY.epsilons:
        assert by["fedavg_ft", eps]["global"] == by["fedavg", eps]["global"]
        assert by["pflmoe", eps]["global"] == by["fedavg", eps]["global"]

    text = (tmp_path / "tiny.md").read_text()
    assert "**A reduced setting, not the full one**" in text
    assert "| FedRoD-hyper | 3 | " in text
    saved = json.loads((tmp_path / "tiny.json").read_text())
    assert {r["epsilon"] for r in saved["rows"]} == {"3", "inf"}
    assert (tmp_path / "tiny.png").stat().st_size > 0


def test_setting_reads_the_environment(monkeypatch):
    monkeypatch.setenv("ROUNDS", "7")
    monkeypatch.setenv("CLIENTS", "50")
    monkeypatch.setenv("EPSILONS", "8, inf")
    monkeypatch.setenv("METHODS", "fedavg,pflmoe")
    s = bench_privacy.Setting.from_env()
    assert (s.rounds, s.clients, s.per_round, s.eval_clients) == (7, 50, 5, 50)
    assert s.epsilons == (8.0, math.inf) and s.methods == ("fedavg", "pflmoe")
    for name in ("ROUNDS", "CLIENTS", "EPSILONS", "METHODS"):
        monkeypatch.delenv(name)
    assert bench_privacy.Setting.from_env() == bench_privacy.Setting()
