"""bench_baselines_gpu's knobs on the CPU: the budget stops training and the rows say where."""

from __future__ import annotations

import json
import sys
import tarfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import bench_baselines_gpu  # noqa: E402  (a script folder, not a package)
from bench_baselines import diverged_fits  # noqa: E402
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
    assert text.split("| FedProx | yes |")[1].splitlines()[0].endswith("| 1 | 0 |")  # rounds,
    assert payload["rows"]["fedprox"]["diverged"] == 0  # and client fits dropped as diverged
    assert (settings.out / "tiny_curve.png").is_file()
    with tarfile.open(settings.out / "tiny_fedprox_runs.tar.gz") as tar:  # what RESUME trains on
        assert "tiny/fedprox/global/latest.safetensors" in tar.getnames()
    assert payload["too_large"] == []


def test_resume_trains_on_the_packed_methods_and_the_others_start_afresh(tmp_path, monkeypatch):
    """A run folder over what a call brings back is not packed: that method starts again."""
    monkeypatch.setattr(bench_baselines_gpu, "RUNS", tmp_path / "runs")
    # FedProx's folder packs to ~1.2 MB (the global TwoNN); Local-only's holds 5 personal TwoNNs
    monkeypatch.setattr(bench_baselines_gpu, "PACK_LIMIT", 3 << 20)

    def lease(out, resume=None):
        settings = bench_baselines_gpu.Settings(
            setting="twonn-50", rounds=500, methods=("fedprox", "local"), device="cpu",
            budget_s=0.0, out=tmp_path / out, name="r", resume=resume, processes=False)
        payload = bench_baselines_gpu.bench(settings)
        write(payload, settings.out, "r", bench_baselines_gpu.render)
        return payload

    first = lease("first")
    assert first["too_large"] == ["local"]
    assert sorted(p.name for p in (tmp_path / "first").glob("*.tar.gz")) == \
        ["r_fedprox_runs.tar.gz"]
    assert "Local only: run folder over 3 MiB packed" in (tmp_path / "first" / "r.md").read_text()
    second = lease("second", resume=tmp_path / "first")
    assert second["rows"]["fedprox"]["rounds"] == 2  # trained on from round 1
    assert second["rows"]["local"]["rounds"] == 1  # started afresh


def test_merge_gathers_methods_run_in_different_leases_into_one_table(tmp_path, monkeypatch):
    """R = 500 of every method does not fit a lease: each runs some, MERGE keeps the rest."""
    monkeypatch.setattr(bench_baselines_gpu, "RUNS", tmp_path / "runs")

    def lease(name, methods, merge=None):
        settings = bench_baselines_gpu.Settings(
            setting="twonn-50", rounds=500, methods=methods, device="cpu", budget_s=0.0,
            out=tmp_path / "out", name=name, pack=False, merge=merge, processes=False)
        payload = bench_baselines_gpu.bench(settings)
        write(payload, settings.out, name, bench_baselines_gpu.render)
        return payload

    first = lease("first", ("fedprox",))
    second = lease("second", ("fedavg_ft",), merge=tmp_path / "out" / "first.json")
    assert list(second["rows"]) == ["fedavg", "fedavg_ft", "fedprox"]  # the table's order
    assert second["rows"]["fedprox"] == first["rows"]["fedprox"]
    assert second["own_top1"]["fedprox"] == first["own_top1"]["fedprox"]
    assert set(second["earlier"]) == {"fedprox"} and "METHODS=fedprox " in \
        second["earlier"]["fedprox"]
    assert "FedProx: from an earlier run, `bash .gpu/run.sh env" in \
        (tmp_path / "out" / "second.md").read_text()
    # a third lease: what the second carried keeps its first origin
    third = lease("third", ("fedper",), merge=tmp_path / "out" / "second.json")
    assert "METHODS=fedprox " in third["earlier"]["fedprox"]
    assert "METHODS=fedavg_ft " in third["earlier"]["fedavg_ft"]
    # a fourth reruns fedprox: its new row replaces the carried one
    fourth = lease("fourth", ("fedprox",), merge=tmp_path / "out" / "third.json")
    assert set(fourth["earlier"]) == {"fedavg_ft", "fedper"}
    assert fourth["rows"]["fedper"] == third["rows"]["fedper"]
    assert not (tmp_path / "out" / "fourth_runs.tar.gz").exists()  # PACK=0


def test_the_rows_count_the_client_fits_a_run_dropped_as_diverged(tmp_path):
    rows = [{"round": 0}, {"round": 1, "diverged": [27]}, {"round": 2, "diverged": [3, 35]}]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert diverged_fits(tmp_path) == 3
    assert diverged_fits(tmp_path, {"diverged": [8]}) == 4  # and a post-federation stage
