"""bench_pflmoe_gpu's knobs on the CPU: the budget stops FedAvg, RESUME trains on, the results say
where each part stopped."""

from __future__ import annotations

import json
import sys
import tarfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import bench_pflmoe_gpu  # noqa: E402  (a script folder, not a package)
from gpu_runs import write  # noqa: E402


def test_budget_stops_fedavg_and_results_say_how_many_rounds_ran(tmp_path, monkeypatch):
    monkeypatch.setattr(bench_pflmoe_gpu, "RUNS", tmp_path / "runs")
    settings = bench_pflmoe_gpu.Settings(device="cpu", rounds=1000, per_epochs=1, alphas=(2.0,),
                                         budget_s=0.0, out=tmp_path / "out", name="tiny",
                                         clients=3, processes=False)
    payload = bench_pflmoe_gpu.bench(settings)
    write(payload, settings.out, settings.name, bench_pflmoe_gpu.render)

    assert payload["rounds"] == {"2": 1} and payload["planned_rounds"] == 1000
    assert [c["round"] for c in payload["curves"]["2"]] == [1]  # the stopped round is scored
    assert len(payload["per_client"]["2"]["mfe"]) == 3
    assert payload["paired"]["2/mfe"]["clients"] == 3
    saved = json.loads((settings.out / "tiny.json").read_text())
    assert saved["rounds"] == {"2": 1} and saved["budget_s"] == 0.0
    text = (settings.out / "tiny.md").read_text()
    assert "rounds run alpha 2: 1 (planned 1000" in text and "BUDGET_S = 0 s" in text
    assert (settings.out / "tiny_curve.png").is_file()
    with tarfile.open(settings.out / "tiny_runs.tar.gz") as tar:  # what RESUME trains on
        assert "tiny/pflmoe-dir2/global/latest.safetensors" in tar.getnames()

    resumed = bench_pflmoe_gpu.Settings(device="cpu", rounds=2, per_epochs=1, alphas=(2.0,),
                                        out=tmp_path / "again", name="tiny", clients=3,
                                        processes=False, resume=settings.out)
    payload = bench_pflmoe_gpu.bench(resumed)
    write(payload, resumed.out, resumed.name, bench_pflmoe_gpu.render)
    assert payload["rounds"] == {"2": 2} and payload["resumed_from"] == {"2": 1}
    assert [c["round"] for c in payload["curves"]["2"]][-1] == 2
    text = (resumed.out / "tiny.md").read_text()
    assert "resumed an earlier run (RESUME) after its rounds alpha 2: 1;" in text
