"""What report.md says equals what the run recorded (metrics.jsonl, final.json).

Before, the Privacy section printed the noise multiplier to 4 decimals: a run at
``dp_noise_multiplier = 1e-6`` (the documented range is [1e-6, 1000]) was reported as run at
noise multiplier ``0.0000``; an epsilon under 0.0005 read ``0.000``; and a round whose epsilon
or clip norm the run could not define (null) made write_report raise, so pfl-sim ended a run
whose rounds were all done with an error instead of its report.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

from server_harness import BIN, run_toml
from waiting import GUARD

from pflkit.server.report import write_report

RUN = run_toml(rounds=2, num_clients=4) + \
    "[aggregation]\ndp_clip_norm = 1.0\ndp_noise_multiplier = 1e-6\n"  # its range's low end


def number_after(text: str, label: str) -> float:
    """The number ``label`` is followed by in ``text``."""
    found = re.search(re.escape(label) + r"\s*([-+0-9.e]+)", text)
    assert found, (label, text)
    return float(found[1])


def test_the_report_states_the_numbers_the_run_recorded(tmp_path):
    (tmp_path / "run.toml").write_text(RUN)
    done = subprocess.run([str(BIN / "pfl-sim"), "--config", "run.toml", "--out", "run"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=GUARD)
    assert done.returncode == 0, done.stderr[-2000:]
    run = tmp_path / "run"
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    final = json.loads((run / "final.json").read_text())
    report = (run / "report.md").read_text()
    last = rows[-1]
    privacy = report.split("## Privacy")[1].split("## ")[0]
    assert number_after(privacy, "noise multiplier") == last["dp_noise_multiplier"] == 1e-6
    assert number_after(privacy, "epsilon =") == round(last["dp_epsilon"], 3)
    assert number_after(privacy, "delta =") == last["dp_delta"]
    assert f"after {len(rows)} rounds" in privacy
    for key, value in final["global_model"].items():  # "last round": the last row's scores
        cell = number_after(report, f"| global model, global test: {key} |")
        assert cell == round(value, 4) == round(last[f"global_{key}"], 4), key


def dp_folder(folder: Path, epsilon: float | None, clip: float | None) -> Path:
    """A run folder as pfl-sim writes it: one DP round whose epsilon and clip norm are given."""
    row = {"round": 0, "lr": 0.05, "clients": [0, 1], "train_loss": 0.5, "dp_epsilon": epsilon,
           "dp_delta": 1e-05, "dp_noise_multiplier": 1000.0, "dp_clip_norm": clip}
    (folder / "metrics.jsonl").write_text(json.dumps(row) + "\n")
    (folder / "config.toml").write_text('[algorithm]\nname = "fedavg"\n\n[aggregation]\n'
                                        "dp_clip_norm = 1.0\ndp_noise_multiplier = 1000.0\n")
    return folder


def test_a_tiny_epsilon_is_not_reported_as_zero(tmp_path):
    privacy = write_report(dp_folder(tmp_path, 0.000412345, 1.0)).read_text()
    assert "epsilon = 0.000412 at delta = 1e-05 after 1 round (noise multiplier 1000;" in privacy


def test_an_epsilon_and_clip_norm_the_run_could_not_define_read_n_a(tmp_path):
    report = write_report(dp_folder(tmp_path, None, None)).read_text()
    assert "epsilon = n/a at delta = 1e-05" in report and "Clip norm" not in report
