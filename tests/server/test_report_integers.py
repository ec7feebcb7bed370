"""Whole-number quantities read as whole numbers: in report.md's tables and on the plots' axes.

final.json holds its summaries as floats (``"clients": 20.0``), and matplotlib picks ticks at
0.25 steps for a short axis: a first-time user read "clients | 20.0000" and "2.5 clients".
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from matplotlib.figure import Figure

from pflkit.server.report import write_report


def tiny_run(folder: Path) -> Path:
    """A run directory of 2 rounds and 3 clients, as the simulator writes it.

    Evaluated after the last round only (eval_interval > rounds): one accuracy point, whose
    axis matplotlib would otherwise tick at 1.900, 1.925, ...
    """
    rows = [{"round": 0, "lr": 0.05, "clients": [0, 1], "train_loss": 1.0},
            {"round": 1, "lr": 0.05, "clients": [1, 2], "train_loss": 0.9, "global_top1": 0.61,
             "global_nll": 1.0}]
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    per_client = [{"client_id": c, "own_top1": 0.7, "class_weighted": 0.6 + c / 50}
                  for c in range(3)]
    summary = {"clients": 3.0, "own_clients": 3.0, "own_top1_mean": 0.7, "own_top1_std": 0.0,
               "class_weighted_mean": 0.62}
    final = {"global_model": {"n": 360, "top1": 0.61},
             "clients": {"summary": summary, "per_client": per_client}}
    (folder / "final.json").write_text(json.dumps(final))
    (folder / "config.toml").write_text('[algorithm]\nname = "fedavg"\n')
    return folder


@pytest.fixture
def ticks(monkeypatch) -> dict[str, dict[str, list[float]]]:
    """Each saved plot's file name -> the x and y tick values it was drawn with."""
    seen: dict[str, dict[str, list[float]]] = {}
    save = Figure.savefig

    def recording(fig: Figure, path: Path, *args, **kwargs) -> None:
        save(fig, path, *args, **kwargs)  # drawn: the locators have seen the final limits
        ax = fig.axes[0]
        low_x, high_x = ax.get_xlim()
        low_y, high_y = ax.get_ylim()
        seen[Path(path).name] = {
            "x": [t for t in ax.get_xticks() if low_x <= t <= high_x],
            "y": [t for t in ax.get_yticks() if low_y <= t <= high_y]}

    monkeypatch.setattr(Figure, "savefig", recording)
    return seen


def test_report_table_shows_counts_as_whole_numbers(tmp_path):
    report = write_report(tiny_run(tmp_path)).read_text()
    assert "| clients: clients | 3 |" in report
    assert "| clients: own_clients | 3 |" in report
    assert "| global model, global test: n | 360 |" in report
    assert "| clients: own_top1_mean | 0.7000 |" in report  # scores keep their 4 digits


@pytest.mark.parametrize(("plot", "axis"), [
    ("accuracy.png", "x"),  # rounds
    ("loss.png", "x"),
    ("clients.png", "y"),  # clients per accuracy bin
])
def test_counting_axes_have_whole_number_ticks(tmp_path, ticks, plot, axis):
    write_report(tiny_run(tmp_path))
    values = ticks[plot][axis]
    assert values, f"{plot}: no {axis} ticks"
    assert all(float(v).is_integer() for v in values), f"{plot} {axis} ticks: {values}"


def test_final_json_writes_client_counts_as_integers():
    """The report hid ``"clients": 20.0``; the summary itself now counts in ints."""
    from pflkit.sdk.evaluation import ClientReport, summarize

    nan = float("nan")
    reports = [ClientReport(c, nan if c == 2 else 0.5, 0.1, 0.2, 1.0, 0.5, 0.5) for c in range(3)]
    summary = json.loads(json.dumps(summarize(reports)))
    assert (summary["clients"], summary["own_clients"]) == (3, 2)
    assert type(summary["clients"]) is int and type(summary["own_clients"]) is int


def test_the_partition_plot_numbers_clients_in_whole_numbers(tmp_path, ticks):
    """Three clients were ticked at -0.5, 0.0, 0.5, ..., 2.5."""
    from pflkit.sdk.data import PartitionConfig, build_federation, load_dataset, plot_partition

    fed = build_federation(load_dataset("synthetic"), PartitionConfig("iid", 3), seed=0)
    plot_partition(fed, tmp_path / "partition.png")
    values = ticks["partition.png"]["x"]
    assert values and all(float(v).is_integer() for v in values), values
