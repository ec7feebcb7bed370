import json

import pytest

from pflkit.server.report import write_report


def summary(top1):
    return {"own_top1_mean": top1, "own_top1_std": 0.05}


@pytest.mark.parametrize(("config", "name"), [
    ('[algorithm]\nname = "superfed_mm"\n', "lam"),  # the method's declared numeric choice
    ("", "choice"),  # no config to read a declaration from
])
def test_report_plots_accuracy_against_the_declared_choice(tmp_path, config, name):
    by_choice = {"best": summary(0.9)} | {f"{i / 10:.1f}": summary(0.5 + i / 40)
                                          for i in range(11)}
    final = {"clients": {"summary": {"own_top1_mean": 0.9}, "per_client": [],
                         "by_choice": by_choice}}
    (tmp_path / "final.json").write_text(json.dumps(final))
    if config:
        (tmp_path / "config.toml").write_text(config)
    report = write_report(tmp_path).read_text()
    assert (tmp_path / "plots" / f"{name}.png").stat().st_size > 0
    assert f"## Accuracy vs {name}\n\n![{name}](plots/{name}.png)" in report


def test_report_has_no_sweep_plot_without_numeric_choices(tmp_path):
    final = {"clients": {"summary": {}, "per_client": [], "by_choice": {"best": summary(0.9)}}}
    (tmp_path / "final.json").write_text(json.dumps(final))
    assert "Accuracy vs" not in write_report(tmp_path).read_text()
    assert list((tmp_path / "plots").glob("choice.png")) == []
