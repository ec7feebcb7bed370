"""What an export folder or a run directory holds is data: it chooses no code and no numbers.

A card handed to ``pfl-export classify`` names the run it is rebuilt from, so the import paths
of that run's config are the card writer's choice, not the user's; a state with NaN weights
or a card of the wrong JSON types is one line, never a traceback or a NaN model.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from test_bad_inputs import export, one_line_error, run_copy
from test_classify_source import relative_export

from pflkit.sdk.state_store import META_KEY, client_state_from_bytes, client_state_to_bytes
from pflkit.sdk.tensorio import (
    CHECKSUM_KEY,
    load_state,
    read_metadata,
    save_state,
    state_to_bytes,
)


def edit_card(folder: Path, edit) -> None:
    card = json.loads((folder / "model_card.json").read_text())
    edit(card)
    (folder / "model_card.json").write_text(json.dumps(card))


def hostile_gift(make_run, tmp_path: Path, monkeypatch) -> tuple[Path, Path]:
    """An export folder someone sent, carrying a run whose config names its own module."""
    folder = relative_export(make_run, tmp_path, monkeypatch)
    downloads = tmp_path / "downloads"
    gift = Path(shutil.copytree(folder, downloads / "gift"))
    shutil.copytree(tmp_path / "project" / "runs" / "r", gift / "run",
                    ignore=shutil.ignore_patterns("exports"))
    marker = tmp_path / "imported"
    (gift / "evil.py").write_text(f"from pathlib import Path\nPath({str(marker)!r}).touch()\n"
                                  "Net = 'not a model'\n")
    config = gift / "run" / "config.toml"
    config.write_text(config.read_text().replace('name = "twonn"', 'name = "gift.evil:Net"'))
    edit_card(gift, lambda card: card["source"].update(run="gift/run"))
    monkeypatch.chdir(downloads)  # the folder on sys.path: gift.evil is importable from here
    return gift, marker


def test_classify_imports_nothing_the_cards_run_names(make_run, tmp_path, monkeypatch):
    gift, marker = hostile_gift(make_run, tmp_path, monkeypatch)
    one_line_error(*export("classify", "gift", "--count", "2"),
                   "model 'gift.evil:Net': not imported: package 'gift' is not in pfl-export "
                   "classify --allow-imports")
    assert not marker.exists()
    code, output = export("classify", "gift", "--count", "2", "--allow-imports", "gift")
    assert code == 2 and marker.exists(), output  # the owner allowed it: imported, then refused


@pytest.mark.parametrize(("edit", "message"), [
    (lambda card: card.update(mixture="x"), "its 'mixture' is not null or a JSON object"),
    (lambda card: card["mixture"].update(choice=[1]) if card["mixture"] else
     card.update(mixture={"choice": [1]}), "its 'mixture' is not null or a JSON object"),
    (lambda card: card["artifacts"][0].update(format=["onnx"]),
     "an artifact has no 'file', 'format' or 'sha256' text"),
])
def test_classify_refuses_a_card_of_the_wrong_json_types(make_run, tmp_path, monkeypatch, edit,
                                                          message):
    folder = relative_export(make_run, tmp_path, monkeypatch)
    edit_card(folder, edit)
    one_line_error(*export("classify", str(folder), "--count", "2"), message)


def test_a_client_state_with_nan_weights_is_refused(make_run, tmp_path):
    run = run_copy(make_run, "superfed_mm", tmp_path)
    path = run / "personalized" / "1.safetensors"
    state = client_state_from_bytes(path.read_bytes())
    state.tensors["local.head.weight"][0, 0] = float("nan")
    path.write_bytes(client_state_to_bytes(state))
    one_line_error(*export("--run", str(run), "--client", "1", "--format", "onnx", "--out",
                           str(tmp_path / "o")),
                   f"{path}: tensor 'local.head.weight' holds NaN or infinite values")
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(("meta", "kind"), [("[1, 2]", "list"), ('"str"', "str"),
                                            ("NaN", "float")])
def test_a_client_state_whose_metadata_is_not_an_object_is_refused(make_run, tmp_path, meta,
                                                                    kind):
    run = run_copy(make_run, "superfed_mm", tmp_path)
    path = run / "personalized" / "1.safetensors"
    tensors = client_state_from_bytes(path.read_bytes()).tensors
    path.write_bytes(state_to_bytes(tensors, {META_KEY: meta}, checksum=True))
    one_line_error(*export("--run", str(run), "--client", "1", "--format", "onnx", "--out",
                           str(tmp_path / "o")),
                   f"metadata is a JSON {kind}, not an object")


def test_finite_weights_whose_logits_overflow_are_refused(make_run, tmp_path):
    run = run_copy(make_run, "fedavg", tmp_path)
    latest = run / "global" / "latest.safetensors"
    meta = read_metadata(latest.read_bytes())  # the checkpoint keeps its rounds_done
    state = load_state(latest)
    state["head.weight"].fill_(3e38)
    save_state(latest, state, {k: v for k, v in meta.items() if k != CHECKSUM_KEY})
    one_line_error(*export("--run", str(run), "--format", "onnx", "--out", str(tmp_path / "o")),
                   "the model's own logits (eager PyTorch) are NaN or infinite on the test rows")
    assert not (tmp_path / "o").exists()


def test_a_checkpoint_claiming_more_rounds_than_its_run_is_refused(make_run, tmp_path):
    run = run_copy(make_run, "fedavg", tmp_path)
    latest = run / "global" / "latest.safetensors"
    meta = read_metadata(latest.read_bytes())
    meta = {**{k: v for k, v in meta.items() if k != CHECKSUM_KEY},
            "rounds_done": "99999999999999999999999"}  # beyond any card reader's integers
    save_state(latest, load_state(latest), meta)
    one_line_error(*export("--run", str(run), "--format", "onnx", "--out", str(tmp_path / "o")),
                   "its 'rounds_done' 99999999999999999999999 is more than the run's 2 rounds")
    assert not (tmp_path / "o").exists()


def test_a_config_toml_edited_since_the_rounds_ran_is_refused(make_run, tmp_path):
    """The export rebuilt the model from the edited file: another method's parameters."""
    run = run_copy(make_run, "fedavg", tmp_path)
    config = run / "config.toml"
    text = config.read_text()
    assert "\nlr = 0.05\n" in text
    config.write_text(text.replace("\nlr = 0.05\n", "\nlr = 0.5\n"))
    one_line_error(*export("--run", str(run), "--format", "onnx", "--out", str(tmp_path / "o")),
                   f"{config} changed since the run's rounds ran (training.lr: 0.05 -> 0.5)")
    assert not (tmp_path / "o").exists()
