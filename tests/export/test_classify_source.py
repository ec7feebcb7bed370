"""`pfl-export classify` finds the card's relative source wherever it is run from.

pfl-export writes the run path it was given (``runs/demo``), relative to the folder it ran in;
classify, run from another folder, looks in the folders above the export folder too.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from test_bad_inputs import export, one_line_error


def relative_export(make_run, tmp_path: Path, monkeypatch) -> Path:
    """Export client 1 with ``--run runs/r`` from the project folder, as the docs do."""
    project = tmp_path / "project"
    shutil.copytree(make_run("fedavg"), project / "runs" / "r")
    monkeypatch.chdir(project)
    code, output = export("--run", "runs/r", "--client", "1", "--format", "onnx")
    assert code == 0, output
    return project / "runs" / "r" / "exports" / "client1"


def test_classify_from_another_folder_finds_the_run(make_run, tmp_path, monkeypatch):
    folder = relative_export(make_run, tmp_path, monkeypatch)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    code, output = export("classify", str(folder), "--count", "2")
    assert code == 0, output
    assert output.strip().endswith("all runtimes agree on top-1: yes")


def test_an_export_away_from_its_run_is_one_line_naming_the_source(make_run, tmp_path,
                                                                    monkeypatch):
    folder = relative_export(make_run, tmp_path, monkeypatch)
    moved = Path(shutil.move(folder, tmp_path / "moved"))
    monkeypatch.chdir(tmp_path)
    one_line_error(*export("classify", str(moved), "--count", "2"),
                   "the card's source.run 'runs/r': not found from the current folder nor from "
                   "any folder above")
