"""What pfl-export reads from a folder it did not write now: code it may import, bytes it reads.

A run folder may be a colleague's or a server's, so its config imports only what the user
allowed (``--allow-imports``), as ``classify`` does for a card; an export folder's card is read
only when small enough to be one, its artifacts are hashed without being read whole, and
``--force`` never deletes a file the user saved into a previous export.
"""

from __future__ import annotations

import json
import re
import shutil
import tracemalloc
from pathlib import Path

from test_bad_inputs import export, one_line_error, run_copy
from test_classify_source import relative_export

from pflkit.export.card_file import MAX_CARD_BYTES


def received_run(make_run, tmp_path: Path, monkeypatch) -> tuple[str, Path]:
    """A run folder someone sent, whose config names a module shipped beside it.

    The package name is this test's own: a module another test imported stays in sys.modules.
    """
    package = re.sub(r"\W", "_", f"gift_{tmp_path.name}")
    folder = relative_export(make_run, tmp_path, monkeypatch)
    gift = tmp_path / "downloads" / package
    shutil.copytree(folder.parents[1], gift / "run", ignore=shutil.ignore_patterns("exports"))
    marker = tmp_path / "imported"
    (gift / "evil.py").write_text(f"from pathlib import Path\nPath({str(marker)!r}).touch()\n"
                                  "Net = 'not a model'\n")
    config = gift / "run" / "config.toml"
    config.write_text(config.read_text().replace('name = "twonn"', f'name = "{package}.evil:Net"'))
    monkeypatch.chdir(gift.parent)  # the folder on sys.path: the module is importable from here
    return package, marker


def test_a_received_runs_config_imports_nothing_the_user_did_not_allow(make_run, tmp_path,
                                                                     monkeypatch):
    package, marker = received_run(make_run, tmp_path, monkeypatch)
    args = ("--run", f"{package}/run", "--client", "1", "--format", "onnx", "--out",
            str(tmp_path / "o"))
    for allowed in ((), ("--allow-imports", f"other,{package}_x")):
        one_line_error(*export(*args, *allowed),
                       f"model '{package}.evil:Net': not imported: package '{package}' is not in "
                       f"pfl-export --allow-imports")
    assert not marker.exists() and not (tmp_path / "o").exists()
    code, output = export(*args, "--allow-imports", package)
    assert code == 2 and marker.exists(), output  # allowed: imported (then not a model)


def test_force_keeps_a_file_saved_into_a_previous_export(make_run, tmp_path):
    """docs/on-device.md saves a device's trained weights beside the trainer it exported."""
    run, out = run_copy(make_run, "fedavg", tmp_path), tmp_path / "app"
    args = ("--run", str(run), "--client", "1", "--format", "onnx", "--out", str(out))
    assert export(*args)[0] == 0
    saved = out / "personal.safetensors"
    saved.write_bytes(b"the device's own weights")
    one_line_error(*export(*args, "--force"), f"--out {out} holds personal.safetensors, which "
                                              "its model_card.json does not list")
    assert saved.read_bytes() == b"the device's own weights"
    saved.unlink()
    code, output = export(*args, "--force")  # only the export's own files: replaced
    assert code == 0, output


def test_force_refuses_a_previous_export_whose_card_is_too_large(make_run, tmp_path):
    run, out = run_copy(make_run, "fedavg", tmp_path), tmp_path / "o"
    args = ("--run", str(run), "--client", "1", "--format", "onnx", "--out", str(out))
    assert export(*args)[0] == 0
    pad_card(out, MAX_CARD_BYTES)
    one_line_error(*export(*args, "--force"), "too large for a model card")
    assert (out / "model.onnx").is_file()


def pad_card(folder: Path, size: int) -> None:
    """Keep the card valid, but make it ``size`` bytes and more."""
    card = json.loads((folder / "model_card.json").read_text())
    card["padding"] = "x" * size
    (folder / "model_card.json").write_text(json.dumps(card))


def test_classify_refuses_a_card_larger_than_a_card_without_reading_it(make_run, tmp_path,
                                                                       monkeypatch):
    folder = relative_export(make_run, tmp_path, monkeypatch)
    pad_card(folder, MAX_CARD_BYTES // 2)  # large, yet a card: classified
    assert export("classify", str(folder), "--count", "2")[0] == 0
    pad_card(folder, MAX_CARD_BYTES)
    one_line_error(*export("classify", str(folder), "--count", "2"),
                   f"more than {MAX_CARD_BYTES} bytes, too large for a model card")


def test_classify_hashes_an_artifact_without_reading_it_whole(make_run, tmp_path, monkeypatch):
    folder = relative_export(make_run, tmp_path, monkeypatch)
    size = 128 << 20
    with (folder / "model.onnx").open("r+b") as file:  # sparse: no disk, all bytes to hash
        file.truncate(size)
    tracemalloc.start()
    try:
        one_line_error(*export("classify", str(folder), "--count", "2"),
                       "model.onnx: its sha256 does not match the model card")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < size // 4, f"{peak} bytes at the peak for a {size}-byte artifact"


def test_a_format_given_twice_is_written_and_listed_once(make_run, tmp_path):
    out = tmp_path / "o"
    code, output = export("--run", str(make_run("fedavg")), "--client", "1", "--format", "onnx",
                          "--format", "onnx", "--out", str(out))
    assert code == 0, output
    card = json.loads((out / "model_card.json").read_text())
    assert [a["file"] for a in card["artifacts"]] == ["model.onnx"]
    assert [p["file"] for p in card["parity"]] == ["model.onnx"]
