from typer.testing import CliRunner

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


def test_pfl_sim_refuses_an_out_it_cannot_create_before_any_work(tmp_path):
    (tmp_path / "file.txt").write_text("keep")
    out = tmp_path / "file.txt" / "run"
    result = runner.invoke(app, ["--out", str(out), "--dataset", "digits", "--model", "twonn",
                                 "--clients", "3", "--rounds", "1", "--quiet"])
    assert result.exit_code == 2
    assert result.output.strip() == (f"error: cannot create the run directory {out}: "
                                      f"{tmp_path / 'file.txt'} is a file")
    assert (tmp_path / "file.txt").read_text() == "keep"
