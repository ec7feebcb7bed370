import json

from pflkit.server.report import write_report


def summary(top1):
    return {"own_top1_mean": top1, "own_top1_std": 0.05}


def test_report_plots_accuracy_against_lambda_when_choices_are_numeric(tmp_path):
    by_choice = {"best": summary(0.9)} | {f"{i / 10:.1f}": summary(0.5 + i / 40)
                                          for i in range(11)}
    final = {"clients": {"summary": {"own_top1_mean": 0.9}, "per_client": [],
                         "by_choice": by_choice}}
    (tmp_path / "final.json").write_text(json.dumps(final))
    report = write_report(tmp_path).read_text()
    assert (tmp_path / "plots" / "lambda.png").stat().st_size > 0
    assert "![lambda](plots/lambda.png)" in report


def test_report_has_no_lambda_plot_without_numeric_choices(tmp_path):
    final = {"clients": {"summary": {}, "per_client": [], "by_choice": {"best": summary(0.9)}}}
    (tmp_path / "final.json").write_text(json.dumps(final))
    assert "lambda.png" not in write_report(tmp_path).read_text()
    assert not (tmp_path / "plots" / "lambda.png").exists()
