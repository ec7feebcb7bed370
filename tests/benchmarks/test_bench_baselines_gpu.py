"""bench_baselines_gpu's knobs on the CPU: the budget stops training and the rows say where."""

from __future__ import annotations

import json
import sys
import tarfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import bench_baselines_gpu  # noqa: E402  (a script folder, not a package)
from gpu_runs import write  # noqa: E402


def test_budget_stops_each_method_and_rows_say_how_many_rounds_ran(tmp_path, monkeypatch):
    monkeypatch.setattr(bench_baselines_gpu, "RUNS", tmp_path / "runs")
    settings = bench_baselines_gpu.Settings(setting="twonn-50", rounds=500, methods=("fedprox",),
                                            device="cpu", budget_s=0.0, out=tmp_path / "out",
                                            name="tiny", processes=False)
    payload = bench_baselines_gpu.bench(settings)
    write(payload, settings.out, "tiny", bench_baselines_gpu.render)

    assert payload["failed"] == {}
    assert payload["rows"]["fedprox"]["rounds"] == 1 and payload["planned_rounds"] == 500
    assert len(payload["own_top1"]["fedprox"]) == 50  # per client: for paired comparisons
    saved = json.loads((settings.out / "tiny.json").read_text())
    assert saved["rows"]["fedprox"]["rounds"] == 1 and saved["budget_s"] == 0.0
    text = (settings.out / "tiny.md").read_text()
    assert "BUDGET_S = 0 s" in text and "| FedProx | yes |" in text
    assert text.split("| FedProx | yes |")[1].splitlines()[0].endswith("| 1 |")
    assert (settings.out / "tiny_curve.png").is_file()
    with tarfile.open(settings.out / "tiny_runs.tar.gz") as tar:  # what RESUME trains on
        assert "tiny/fedprox/global/latest.safetensors" in tar.getnames()
