"""DeviceTrainer facing what an app's user or a copied export folder can hand it.

An export folder and a user's labelled rows come from outside the process: a program or
weights file of another export, truncated or with NaN, a card whose recipe numbers are out of
their documented range or whose file names leave the folder, rows of another shape, NaN images,
labels that are not the program's classes. Each is ONE line (TrainingProgramError) before any
weight changes, instead of a C++ runtime trace, NaN weights or a half-loaded program.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from pflkit.export import Choice, export_model, load_run_source
from pflkit.export.device_trainer import DeviceTrainer, TrainingProgramError
from pflkit.export.training_program import PROGRAM_FILE, WEIGHTS_FILE
from pflkit.sdk.tensorio import load_state, save_state

CARD = "model_card.json"


@pytest.fixture(scope="module")
def export(make_run, tmp_path_factory) -> tuple[Path, object]:
    """A FedRoD personal-head trainer export (a ``prepare`` method and a tiny head)."""
    source = load_run_source(make_run("fedrod_hyper"), 1)
    out = tmp_path_factory.mktemp("trainer") / "out"
    export_model(source, Choice(), out, ["executorch"], trainer=True,
                 trainer_params={"ft_epochs": 1, "ft_scope": "personal_head"})
    return out, source


def _copy(export: tuple[Path, object], tmp_path: Path) -> Path:
    """A private copy to damage: the module's export stays intact for the other tests."""
    folder = tmp_path / "copy"
    shutil.copytree(export[0], folder)
    return folder


def _edit_card(folder: Path, edit: Callable[[dict], object]) -> None:
    """Change the card's training section as a hand edit (or a hostile copy) would."""
    card = json.loads((folder / CARD).read_text())
    edit(card["training"])
    (folder / CARD).write_text(json.dumps(card))


def _refused(folder: Path, match: str) -> None:
    """Loading the folder fails with one line matching ``match``."""
    with pytest.raises(TrainingProgramError, match=match) as err:
        DeviceTrainer.from_export(folder)
    assert "\n" not in str(err.value)


def test_damaged_or_foreign_files_are_refused_before_loading(export, tmp_path):
    folder = _copy(export, tmp_path)
    program = (folder / PROGRAM_FILE).read_bytes()
    (folder / PROGRAM_FILE).write_bytes(program[: len(program) // 2])
    _refused(folder, f"{PROGRAM_FILE}: does not match its model card")
    (folder / PROGRAM_FILE).write_bytes(program)
    weights = load_state(folder / WEIGHTS_FILE)
    save_state(folder / WEIGHTS_FILE, {k: torch.full_like(v, float("nan"))
                                       for k, v in weights.items()})
    _refused(folder, f"{WEIGHTS_FILE}: does not match its model card")
    save_state(folder / WEIGHTS_FILE, weights)
    DeviceTrainer.from_export(folder)  # restored: loads again
    (folder / CARD).write_text("{not json")
    _refused(folder, "not a readable model card")


@pytest.mark.parametrize(("field", "edit"), [
    ("training.program", lambda t: t.update(program="../" + t["program"])),
    ("training.initial_weights", lambda t: t.update(initial_weights="/etc/passwd")),
    ("training.optimizers\\[0\\].lr", lambda t: t["optimizers"][0].update(lr=-0.1)),
    ("training.optimizers\\[0\\].lr", lambda t: t["optimizers"][0].update(lr=float("nan"))),
    ("training.optimizers\\[0\\].momentum", lambda t: t["optimizers"][0].update(momentum="x")),
    ("training.schedule.epochs", lambda t: t["schedule"].update(epochs=0)),
    ("training.schedule.epochs", lambda t: t["schedule"].update(epochs=1.5)),
    ("training.schedule.batch_size", lambda t: t["schedule"].update(batch_size=-1)),
    ("training.schedule.batch_size", lambda t: t["schedule"].update(batch_size=10**6)),
])
def test_card_numbers_and_names_outside_their_range_are_refused(export, tmp_path, field, edit):
    folder = _copy(export, tmp_path)
    _edit_card(folder, edit)
    _refused(folder, f"^{field}: ")


@pytest.mark.parametrize(("match", "rows"), [
    ("label 10 is not a class of this program \\(0..9\\)",
     lambda x, y: (x, torch.full_like(y, 10))),
    ("label -1 is not a class", lambda x, y: (x, torch.full_like(y, -1))),
    ("labels must be integer class indices", lambda x, y: (x, y.float() + 0.5)),
    ("images must be finite", lambda x, y: (torch.full_like(x, float("nan")), y)),
    ("images must be finite", lambda x, y: (x.masked_fill(x > 0, float("inf")), y)),
    ("images have shape \\(20, 3, 8, 8\\)", lambda x, y: (x.expand(-1, 3, -1, -1), y)),
    ("one label per image \\(20\\)", lambda x, y: (x, y[:5])),
])
def test_bad_rows_are_refused_before_any_weight_changes(export, match, rows):
    out, source = export
    device = DeviceTrainer.from_export(out)
    before = device.weights()
    x, y = rows(source.train.x[:20], source.train.y[:20])
    with pytest.raises(TrainingProgramError, match=match) as err:
        device.personalize(x, y)
    assert "\n" not in str(err.value)
    assert all(torch.equal(before[k], w) for k, w in device.weights().items())


def test_weights_are_checked_whole_before_any_is_copied(export):
    out, _ = export
    device = DeviceTrainer.from_export(out)
    before = device.weights()
    *first, last = list(before)
    bad = {**{k: torch.zeros_like(before[k]) for k in first}, last: torch.zeros(3)}
    with pytest.raises(TrainingProgramError, match=f"{last} has shape"):
        device.load_weights(bad)
    with pytest.raises(TrainingProgramError, match="not all finite"):
        device.load_weights({**bad, last: torch.full_like(before[last], float("nan"))})
    assert all(torch.equal(before[k], w) for k, w in device.weights().items())


def test_one_labelled_sample_or_none_is_a_valid_stage(export):
    out, source = export
    for n in (0, 1):
        device = DeviceTrainer.from_export(out)
        result = device.personalize(source.train.x[:n], source.train.y[:n])
        assert result.steps == n  # one epoch: a single batch of the single row
        assert all(torch.isfinite(w).all() for w in device.weights().values())


def test_images_of_another_float_type_train_as_float32(export):
    out, source = export
    x, y = source.train.x[:20], source.train.y[:20]
    trained = []
    for images in (x, x.double(), x.half().float().half()):
        device = DeviceTrainer.from_export(out)
        device.personalize(images, y)
        trained.append(device.weights())
    assert all(torch.equal(trained[0][k], trained[1][k]) for k in trained[0])
    assert all(torch.isfinite(w).all() for w in trained[2].values())
