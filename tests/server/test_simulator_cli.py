import math
import shutil

from torch import nn
from typer.testing import CliRunner

from pflkit.sdk.models import MODELS, ModelInfo, SplitModel
from pflkit.server.simulator import Simulation
from pflkit.server.simulator_cli import app

runner = CliRunner()


def test_pfl_sim_runs_from_flags_and_prints_the_report_path(tmp_path):
    out = tmp_path / "run"
    result = runner.invoke(app, [
        "--out", str(out), "--dataset", "digits", "--clients", "4", "--partition", "iid",
        "--model", "twonn", "--algorithm", "fedprox", "--param", "mu=0.1", "--rounds", "2",
        "--clients-per-round", "2", "--epochs", "1", "--batch-size", "32", "--quiet",
    ])
    assert result.exit_code == 0, result.output
    assert str(out / "report.md") in result.output
    assert 'mu = 0.1' in (out / "config.toml").read_text()
    resumed = runner.invoke(app, ["--resume", str(out), "--quiet"])
    assert resumed.exit_code == 0, resumed.output


def test_pfl_sim_reports_bad_input_clearly(tmp_path):
    result = runner.invoke(app, ["--out", str(tmp_path / "r"), "--dataset", "mnist",
                                 "--data-root", str(tmp_path / "none"), "--quiet"])
    assert result.exit_code == 2
    assert "train-images-idx3-ubyte" in result.output
    bad = runner.invoke(app, ["--out", str(tmp_path / "r2"), "--dataset", "digits",
                              "--algorithm", "fedprox", "--param", "mu=abc", "--quiet"])
    assert bad.exit_code == 2 and "fedprox: hyperparameter 'mu'" in bad.output


def test_an_executor_typo_is_one_line_before_any_data_is_read_and_leaves_no_out(tmp_path):
    """Issue 23 item 2: the executor name is checked with the config, not after data loading."""
    out = tmp_path / "run"
    result = runner.invoke(app, ["--out", str(out), "--dataset", "mnist",
                                 "--data-root", str(tmp_path / "none"),  # never read
                                 "--set", "execution.executor=batchd", "--quiet"])
    assert result.exit_code == 2
    assert result.output.strip() == ("error: execution.executor: unknown executor 'batchd' "
                                      "(did you mean 'batched'? known: sequential, batched, "
                                      "ray)")
    assert not out.exists()


def test_pfl_sim_refuses_an_out_it_cannot_create_before_any_work(tmp_path):
    (tmp_path / "file.txt").write_text("keep")
    out = tmp_path / "file.txt" / "run"
    result = runner.invoke(app, ["--out", str(out), "--dataset", "digits", "--model", "twonn",
                                 "--clients", "3", "--rounds", "1", "--quiet"])
    assert result.exit_code == 2
    assert result.output.strip() == (f"error: cannot create the run directory {out}: "
                                      f"{tmp_path / 'file.txt'} is a file")
    assert (tmp_path / "file.txt").read_text() == "keep"


SMALL_RUN = ["--dataset", "digits", "--clients", "3", "--model", "twonn", "--rounds", "1",
             "--epochs", "1", "--quiet"]


def test_a_run_that_fails_before_its_first_round_leaves_an_out_the_next_run_accepts(
        tmp_path, monkeypatch):
    def crash(self):
        raise RuntimeError("training crashed")

    kept = tmp_path / "kept"  # an --out that exists: the user's files in it stay
    kept.mkdir()
    (kept / "notes.txt").write_text("mine")
    new = tmp_path / "new" / "run"  # an --out whose parent is created too
    with monkeypatch.context() as patch:
        patch.setattr(Simulation, "run_round", crash)
        for out in (kept, new):
            failed = runner.invoke(app, ["--out", str(out), *SMALL_RUN])
            assert isinstance(failed.exception, RuntimeError)
    assert [p.name for p in kept.iterdir()] == ["notes.txt"]
    assert not (tmp_path / "new").exists()
    for out in (kept, new):
        again = runner.invoke(app, ["--out", str(out), *SMALL_RUN])
        assert again.exit_code == 0, again.output
        assert (out / "report.md").is_file()
    assert (kept / "notes.txt").read_text() == "mine"


def test_a_run_that_fails_after_training_keeps_its_rounds_and_resume_finishes_it(
        tmp_path, monkeypatch):
    def crash(self):
        raise RuntimeError("evaluation crashed")

    out = tmp_path / "run"
    with monkeypatch.context() as patch:
        patch.setattr(Simulation, "final_evaluation", crash)
        failed = runner.invoke(app, ["--out", str(out), *SMALL_RUN])
    assert isinstance(failed.exception, RuntimeError)
    assert (out / "global" / "latest.safetensors").is_file()  # the trained round is not lost
    refused = runner.invoke(app, ["--out", str(out), *SMALL_RUN])
    assert refused.exit_code == 2
    assert refused.output.strip() == (f"error: {out} already holds a run (1 round done): "
                                      f"continue it with --resume {out}, or choose another "
                                      "--out")
    resumed = runner.invoke(app, ["--resume", str(out), "--quiet"])
    assert resumed.exit_code == 0, resumed.output
    assert (out / "report.md").is_file()


def test_a_stopped_run_keeps_its_rounds_for_resume(tmp_path, monkeypatch):
    def interrupt(self):
        raise KeyboardInterrupt

    out = tmp_path / "run"
    monkeypatch.setattr(Simulation, "final_evaluation", interrupt)
    stopped = runner.invoke(app, ["--out", str(out), *SMALL_RUN])
    assert stopped.exit_code != 0
    assert (out / "global" / "latest.safetensors").is_file()


def test_a_model_whose_body_is_wider_than_feature_dim_is_one_line_before_any_write(
        tmp_path, monkeypatch):
    def wide(shape, num_classes):
        body = nn.Sequential(nn.Flatten(), nn.Linear(math.prod(shape), 16), nn.ReLU())
        return SplitModel(body, nn.Linear(16, num_classes), 8)

    monkeypatch.setitem(MODELS, "wide", ModelInfo(wide, "16 features, declares 8"))
    out = tmp_path / "run"
    result = runner.invoke(app, ["--out", str(out), *SMALL_RUN, "--model", "wide",
                                 "--algorithm", "pflmoe", "--param", "variant=mfe"])
    assert result.exit_code == 2
    assert result.output.strip() == ("error: model 'wide': its body gives 16 features per "
                                     "input but it declares feature_dim = 8")
    assert not out.exists()


def test_a_config_that_names_nothing_about_the_run_is_refused_before_any_write(
        tmp_path, monkeypatch):
    """An empty file, or no --config and no run flags, was a silent 100-round run of defaults."""
    def no_training(self):
        raise RuntimeError("a run started")

    monkeypatch.setattr(Simulation, "run_round", no_training)
    empty = tmp_path / "empty.toml"
    empty.write_text("# nothing yet\n")
    out = tmp_path / "run"
    cases = [(["--config", str(empty)], f"{empty}: sets nothing about the run"),
             ([], "give --config FILE or flags that describe the run"),
             (["--device", "cpu"], "give --config FILE or flags that describe the run")]
    for args, reason in cases:
        result = runner.invoke(app, ["--out", str(out), *args, "--quiet"])
        assert result.exit_code == 2, result.output
        assert result.output.strip() == (f"error: {reason} (an empty run config would start "
                                          "a 100-round run of the defaults)")
        assert not out.exists()


def test_a_fresh_run_refuses_an_out_holding_files_a_run_writes(tmp_path):
    """They were overwritten (and a failed run would have deleted them)."""
    out = tmp_path / "project"
    (out / "plots").mkdir(parents=True)
    (out / "config.toml").write_text("my own config")
    (out / "report.md").write_text("my notes")
    result = runner.invoke(app, ["--out", str(out), *SMALL_RUN])
    assert result.exit_code == 2, result.output
    assert result.output.strip() == (f"error: {out} already holds config.toml, report.md, "
                                      "plots, which a run writes: choose another --out, or "
                                      "delete them")
    assert (out / "config.toml").read_text() == "my own config"
    assert (out / "report.md").read_text() == "my notes"
    assert sorted(p.name for p in out.iterdir()) == ["config.toml", "plots", "report.md"]


def test_a_newline_in_a_setting_keeps_the_run_resumable(tmp_path):
    """config.toml was written with a raw newline: unreadable, so the run could not resume."""
    out, root = tmp_path / "run", tmp_path / "x\ny\t"
    root.mkdir()  # a --data-root that is not a folder is refused (tests/sdk/test_data_root.py)
    result = runner.invoke(app, ["--out", str(out), *SMALL_RUN, "--data-root", str(root)])
    assert result.exit_code == 0, result.output
    assert Simulation.resume(out, progress=False).config.data.root == str(root)


def test_resume_drops_a_metrics_line_cut_short_and_names_a_broken_one(tmp_path, monkeypatch):
    def crash(self):
        raise RuntimeError("evaluation crashed")

    out = tmp_path / "run"
    with monkeypatch.context() as patch:
        patch.setattr(Simulation, "final_evaluation", crash)
        runner.invoke(app, ["--out", str(out), *SMALL_RUN])
    metrics = out / "metrics.jsonl"
    rows = metrics.read_text()
    metrics.write_text(rows + '{"round": 1, "lr": 0.0')  # the disk filled mid-write
    resumed = runner.invoke(app, ["--resume", str(out), "--quiet"])
    assert resumed.exit_code == 0, resumed.output
    assert metrics.read_text().startswith(rows)
    metrics.write_text('{"round": 0, "lr\n' + rows)
    broken = runner.invoke(app, ["--resume", str(out), "--quiet"])
    assert broken.exit_code == 2
    assert broken.output.strip().startswith(f"error: {metrics}: line 1 is not JSON (")


def test_a_fresh_run_refuses_an_out_inside_another_runs_state_folders(tmp_path):
    """Its checkpoints and plots would sit among the outer run's (which pfl-export refuses)."""
    outer = tmp_path / "outer"
    (outer / "global").mkdir(parents=True)
    (outer / "config.toml").write_text("seed = 0\n")
    mine = runner.invoke(app, ["--out", str(outer / "plots" / "mine"), *SMALL_RUN])
    assert mine.exit_code == 0, mine.output  # no run there yet: config.toml alone is anyone's
    shutil.rmtree(outer / "plots")
    (outer / "partition.safetensors").write_bytes(b"")  # what a run writes first
    for out in (outer / "global" / "x", outer / "plots" / "a" / "b"):
        result = runner.invoke(app, ["--out", str(out), *SMALL_RUN])
        assert result.exit_code == 2, result.output
        folder = out.parent if out.name == "x" else outer / "plots"
        assert result.output.strip() == (f"error: {out} lies inside {folder}, where the run "
                                          f"{outer} keeps its state: choose another --out")
        assert not out.exists()
    beside = runner.invoke(app, ["--out", str(outer / "exports" / "run2"), *SMALL_RUN])
    assert beside.exit_code == 0, beside.output  # a run's other folders are the user's
