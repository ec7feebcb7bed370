"""What pfl-export and pfl-fedrod-head refuse: overwriting their source, damaged inputs.

Each case is one clear line, exit 2, and the run (or the file) handed in is left intact.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
import torch
from test_bad_inputs import export, one_line_error, run_copy
from typer.testing import CliRunner

from pflkit.export.contract import ExportError
from pflkit.sdk.algorithms.base import ClientState
from pflkit.sdk.fedrod_head_cli import app as head_app
from pflkit.sdk.state_store import DeviceStateStore, client_state_from_bytes, client_state_to_bytes
from pflkit.sdk.tensorio import load_state, read_metadata, save_state

COUNTS = "5,0,12,0,0,3,0,0,9,1"


def tree(path: Path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*"))
            if p.is_file()}


def reshape_tensor(path: Path, name: str, shape: tuple[int, ...]) -> None:
    """Re-save ``path`` with tensor ``name`` of another shape (a valid checksum, kept metadata)."""
    data = path.read_bytes()
    state = load_state(path)
    state[name] = torch.zeros(shape)
    meta = {k: v for k, v in read_metadata(data).items() if k != "pflkit.sha256"}
    save_state(path, state, meta)


def set_client_meta(path: Path, **meta: object) -> None:
    state = client_state_from_bytes(path.read_bytes())
    state.meta.update(meta)
    path.write_bytes(client_state_to_bytes(state))


# 1: --out never replaces the source
@pytest.mark.parametrize("out", [".", "global", "personalized", "clients/x", ".."])
def test_an_output_over_the_run_is_refused_and_the_run_kept(make_run, tmp_path, out):
    run = run_copy(make_run, "superfed_mm", tmp_path)
    before = tree(run)
    code, output = export("--run", str(run), "--client", "1", "--format", "onnx",
                          "--out", str(run / out), "--force")
    assert code == 2 and len(output.strip().splitlines()) == 1, output
    assert tree(run) == before


def test_force_replaces_only_a_previous_export(make_run, tmp_path):
    run = run_copy(make_run, "fedavg", tmp_path)
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep")
    one_line_error(*export("--run", str(run), "--format", "onnx", "--out",
                           str(tmp_path / "mine"), "--force"), "is not a previous export")
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep"
    args = ["--run", str(run), "--format", "onnx", "--out", str(run / "exports" / "generic")]
    assert export(*args)[0] == 0
    assert export(*args, "--force")[0] == 0  # the default place, a previous export: replaced


def test_state_dir_output_over_its_inputs_is_refused(make_run, tmp_path):
    run = make_run("fedavg")
    DeviceStateStore(tmp_path / "app").save(ClientState())
    before = tree(tmp_path / "app")
    base = ["--state-dir", str(tmp_path / "app"), "--global", str(run / "global" /
            "latest.safetensors"), "--config", str(run / "config.toml"), "--format", "onnx"]
    for out in (tmp_path / "app", run / "global"):
        code, output = export(*base, "--out", str(out), "--force")
        assert code == 2 and "which the export reads" in output, output
    assert tree(tmp_path / "app") == before


# 2: pfl-fedrod-head never overwrites silently, never the run's state
def head(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(head_app, list(args))
    return result.exit_code, result.output


def test_fedrod_head_refuses_to_overwrite(make_run, tmp_path):
    run = run_copy(make_run, "fedrod_hyper", tmp_path)
    latest = run / "global" / "latest.safetensors"
    before = tree(run)
    for out in (latest, run / "global" / "head.safetensors",
                run / "clients" / "0.r1.safetensors", run / "personalized" / "0.safetensors"):
        code, output = head(str(run), "--class-counts", COUNTS, "--out", str(out), "--force")
        assert code == 2 and ("global state it reads" in output or "lies inside" in output)
    code, output = head(str(latest), "--class-counts", COUNTS, "--out", str(latest), "--force")
    assert code == 2 and "global state it reads" in output, output
    assert tree(run) == before
    mine = tmp_path / "head.safetensors"
    mine.write_text("keep")
    code, output = head(str(run), "--class-counts", COUNTS, "--out", str(mine))
    assert code == 2 and "already exists; use --force" in output and mine.read_text() == "keep"
    assert head(str(run), "--class-counts", COUNTS, "--out", str(mine), "--force")[0] == 0


# 3: tensors of the wrong shape name the file and tensor
@pytest.mark.parametrize(("algorithm", "file", "name"), [
    ("superfed_mm", "global/latest.safetensors", "head.weight"),
    ("superfed_mm", "personalized/1.safetensors", "local.head.weight"),
    ("apfl", "clients/1.r1.safetensors", "personal.body.1.weight"),
])
def test_a_tensor_of_the_wrong_shape_is_one_line(make_run, tmp_path, algorithm, file, name):
    run = run_copy(make_run, algorithm, tmp_path)
    reshape_tensor(run / file, name, (7, 3))
    one_line_error(*export("--run", str(run), "--client", "1", "--format", "onnx",
                           "--out", str(tmp_path / "o")),
                   f"{run / file}: tensor '{name}' has shape (7, 3), the model's is")
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(("name", "shape"), [("hyper.fc1.weight", (16, 7)),
                                             ("hyper.fc2.weight", (7, 16))])
def test_fedrod_head_blames_a_reshaped_hypernetwork(make_run, tmp_path, name, shape):
    run = run_copy(make_run, "fedrod_hyper", tmp_path)
    latest = run / "global" / "latest.safetensors"
    reshape_tensor(latest, name, shape)
    code, output = head(str(run), "--class-counts", COUNTS, "--out", str(tmp_path / "h"))
    assert code == 2, output
    assert f"{latest}: tensor '{name}' has shape {shape}, the model's is" in output, output
    assert "Traceback" not in output and not (tmp_path / "h").exists()


# 4: a stored SuPerFed lambda outside [0, 1] is refused; cards are strict JSON
@pytest.mark.parametrize("lam", [5.0, -1.0, float("nan")])
def test_a_stored_lambda_outside_0_1_is_refused(make_run, tmp_path, lam):
    run = run_copy(make_run, "superfed_mm", tmp_path)
    set_client_meta(run / "personalized" / "1.safetensors", **{"lambda": lam})
    code, output = export("--run", str(run), "--client", "1", "--format", "onnx",
                          "--out", str(tmp_path / "o"))
    one_line_error(code, output, "stored lambda")
    assert str(run / "personalized" / "1.safetensors") in output
    assert not (tmp_path / "o").exists()


def test_cards_are_never_written_with_nan(tmp_path):
    from pflkit.export.pipeline import write_json

    with pytest.raises(ExportError, match="NaN or infinite"):
        write_json(tmp_path / "card.json", {"x": float("nan")})
    assert not (tmp_path / "card.json").exists()


# 5: without --client, every method exports its generic model
@pytest.mark.parametrize("algorithm", ["superfed_mm", "fedrod_hyper"])
def test_without_client_the_generic_model_is_exported(make_run, tmp_path, algorithm):
    code, output = export("--run", str(make_run(algorithm)), "--format", "onnx",
                          "--out", str(tmp_path / "o"))
    assert code == 0, output
    card = json.loads((tmp_path / "o" / "model_card.json").read_text())
    assert card["mixture"]["choice"] == {"head": "generic"}


# 6, 7: classify checks its folder, card and artifacts
@pytest.fixture(scope="module")
def exported(tmp_path_factory, make_run):
    out = tmp_path_factory.mktemp("classify") / "o"
    code, output = export("--run", str(make_run("fedavg")), "--client", "1", "--out", str(out))
    assert code == 0, output
    return out


def classify(folder: Path, *args: str) -> tuple[int, str]:
    return export("classify", str(folder), *args)


def damaged(exported: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(exported, tmp_path / "e"))


@pytest.mark.parametrize(("count", "message"), [("0", "--count must be in 1..10000"),
                                                ("-3", "--count must be in 1..10000"),
                                                ("100000", "--count must be in 1..10000"),
                                                ("5000", "but the client test split has only")])
def test_classify_count_range(exported, count, message):
    one_line_error(*classify(exported, "--count", count), message)


@pytest.mark.parametrize(("damage", "message"), [
    (lambda e: (e / "model.onnx").unlink(), "model.onnx: the card's artifact is missing"),
    (lambda e: (e / "model.onnx").write_bytes((e / "model.onnx").read_bytes()[:100]),
     "model.onnx: its sha256 does not match the model card"),
    (lambda e: (e / "model.pte").write_bytes((e / "model.pte").read_bytes()[:100]),
     "model.pte: its sha256 does not match the model card"),
    (lambda e: (e / "model_card.json").write_text("[]"), "not a JSON object"),
    (lambda e: (e / "model_card.json").write_text("{"), "not valid JSON"),
    (lambda e: edit_card(e, source=None), "'source' is missing"),
    (lambda e: edit_card(e, artifacts=[{"file": "../other/model.onnx", "format": "onnx",
                                        "sha256": "0"}]), "not a file name in"),
])
def test_classify_damaged_export_is_one_line(exported, tmp_path, damage, message):
    folder = damaged(exported, tmp_path)
    damage(folder)
    one_line_error(*classify(folder, "--count", "2"), message)


def test_classify_a_file_instead_of_a_folder(exported):
    one_line_error(*classify(exported / "model.onnx"), "is not a folder")


def test_classify_a_matching_hash_still_runs(exported):
    card = json.loads((exported / "model_card.json").read_text())
    onnx = next(a for a in card["artifacts"] if a["file"] == "model.onnx")
    assert onnx["sha256"] == hashlib.sha256((exported / "model.onnx").read_bytes()).hexdigest()
    assert classify(exported, "--count", "2")[0] == 0


def edit_card(folder: Path, **changes: object) -> None:
    card = json.loads((folder / "model_card.json").read_text())
    card.update(changes)
    (folder / "model_card.json").write_text(json.dumps(card))


# 8: --golden-samples has a range
@pytest.mark.parametrize("samples", ["-3", "0", "100000000"])
def test_golden_samples_outside_its_range_is_refused(make_run, tmp_path, samples):
    one_line_error(*export("--run", str(make_run("fedavg")), "--golden", "--golden-samples",
                           samples, "--out", str(tmp_path / "o")),
                   "--golden-samples must be in 1..1000")


# 9: --client and --round do not apply to --state-dir
@pytest.mark.parametrize("option", [["--client", "-99"], ["--round", "1"]])
def test_state_dir_refuses_client_and_round(make_run, tmp_path, option):
    run = make_run("fedavg")
    one_line_error(*export("--state-dir", str(tmp_path), "--global",
                           str(run / "global" / "latest.safetensors"), "--config",
                           str(run / "config.toml"), *option, "--out", str(tmp_path / "o")),
                   f"{option[0]} select")


# 10: a --state-dir that is missing or a file is named as such, not as "holds no client state"
@pytest.mark.parametrize(("name", "said"), [("nope", "does not exist"),
                                            ("demo.log", "is not a folder")])
def test_state_dir_missing_or_a_file_is_said(make_run, tmp_path, name, said):
    run = make_run("fedavg")
    (tmp_path / "demo.log").write_text("a log\n")
    one_line_error(*export("--state-dir", str(tmp_path / name), "--global",
                           str(run / "global" / "latest.safetensors"), "--config",
                           str(run / "config.toml"), "--out", str(tmp_path / "o")),
                   f"--state-dir {tmp_path / name} {said}")
    assert not (tmp_path / "o").exists()
