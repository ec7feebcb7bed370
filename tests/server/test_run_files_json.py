"""A run's JSON files are strict JSON: a number the run cannot define is null, never NaN."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pflkit.sdk.tensorio import undefined_as_null
from pflkit.server.simulator_cli import app


def strict(text: str) -> object:
    """Parse as strict JSON parsers (browsers, jq, Java) do: NaN and Infinity are errors."""
    def refuse(name: str) -> None:
        raise ValueError(f"not JSON: {name}")
    return json.loads(text, parse_constant=refuse)


def test_undefined_numbers_become_null_at_any_depth():
    nan, inf = float("nan"), float("inf")
    assert undefined_as_null({"a": [1.5, nan, (inf, -inf)], "b": {"c": nan}, "d": "NaN"}) == \
        {"a": [1.5, None, [None, None]], "b": {"c": None}, "d": "NaN"}


def test_a_run_without_own_test_splits_writes_null_and_reports_n_a(tmp_path: Path):
    out = tmp_path / "run"
    result = CliRunner().invoke(app, [
        "--out", str(out), "--dataset", "digits", "--clients", "4", "--model", "twonn",
        "--rounds", "2", "--clients-per-round", "2", "--epochs", "1", "--quiet",
        "--set", "data.test_fraction=0"])
    assert result.exit_code == 0, result.output
    final = strict((out / "final.json").read_text())
    summary = final["clients"]["summary"]
    assert summary["own_top1_mean"] is None  # no client has its own test rows
    assert 0.0 <= summary["class_weighted_mean"] <= 1.0
    rows = [strict(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["round"] for r in rows] == [0, 1]
    assert "| clients: own_top1_mean | n/a |" in (out / "report.md").read_text()


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_save_json_never_writes_nan_or_infinity(tmp_path: Path, value: float):
    from pflkit.sdk.tensorio import save_json
    save_json(tmp_path / "f.json", {"x": value, "y": [value]})
    assert strict((tmp_path / "f.json").read_text()) == {"x": None, "y": [None]}
