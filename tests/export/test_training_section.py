"""A trainer card's ``training`` section is read by the same rules in Python and on the phone.

The cases of android-demo's ``fixtures/trainer/refusals.json`` are hand edits of real trainer
cards; the Android core's TrainingSectionRefusalsTest runs the same file, so a card one
trainer refuses the other refuses too, naming the same field. Before, Python accepted most of
them and failed later (a phase's unknown optimizer as a KeyError mid-personalization) or never
(an unknown train_method, a lambda grid over 1).
"""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch

from pflkit.export import Choice, export_model, load_run_source
from pflkit.export.device_trainer import DeviceTrainer, TrainingProgramError
from pflkit.export.training_program import PROGRAM_FILE
from pflkit.export.training_section import check_section

FIXTURES = Path(__file__).resolve().parents[2] / \
    "android-demo/core/src/test/resources/fixtures/trainer"
CASES = json.loads((FIXTURES / "refusals.json").read_text())["cases"]
CARDS = ("superfed_mm", "fedrod_linear", "pflmoe_mfe")


def _training(card: str) -> dict[str, Any]:
    return copy.deepcopy(json.loads((FIXTURES / card / "model_card.json").read_text())["training"])


def _edit(section: dict[str, Any], case: dict[str, Any]) -> None:
    *steps, last = case["path"]
    parent: Any = section
    for step in steps:
        parent = parent[step]
    if "value" in case:
        parent[last] = case["value"]
    else:
        del parent[last]


@pytest.mark.parametrize("card", CARDS)
def test_real_trainer_sections_pass(card):
    check_section(_training(card))


@pytest.mark.parametrize("case", CASES, ids=[c["case"] for c in CASES])
def test_a_hand_edit_the_phone_refuses_is_refused_naming_its_field(case):
    section = _training(case["card"])
    _edit(section, case)
    with pytest.raises(TrainingProgramError) as err:
        check_section(section)
    assert str(err.value).startswith(case["field"] + ": "), str(err.value)
    assert "\n" not in str(err.value)


@pytest.fixture(scope="module")
def export(make_run, tmp_path_factory) -> Path:
    """A SuPerFed trainer export (a lambda input, no prepare method)."""
    out = tmp_path_factory.mktemp("section") / "out"
    export_model(load_run_source(make_run("superfed_mm"), 1), Choice(), out, ["executorch"],
                 trainer=True, trainer_params={"ft_epochs": 1})
    return out


def test_the_program_runs_the_method_its_card_names(export, tmp_path):
    folder = tmp_path / "copy"
    shutil.copytree(export, folder)
    card = json.loads((folder / "model_card.json").read_text())
    card["training"]["train_method"] = "forward"  # a method this program does not have
    (folder / "model_card.json").write_text(json.dumps(card))
    with pytest.raises(TrainingProgramError, match="not a training program the ExecuTorch"):
        DeviceTrainer.from_export(folder)


def test_the_checked_bytes_are_what_loads(export, monkeypatch):
    """The program is read once: hashed and loaded from the same bytes, not re-read."""
    reads: list[str] = []
    read_bytes = Path.read_bytes

    def counted(path: Path) -> bytes:
        reads.append(path.name)
        return read_bytes(path)

    monkeypatch.setattr(Path, "read_bytes", counted)
    DeviceTrainer.from_export(export)
    assert reads.count(PROGRAM_FILE) == 1


def test_each_stage_starts_with_fresh_optimizers(export, make_run):
    """ExecuTorch's SGD keeps momentum between steps: a second stage must not inherit it."""
    rows = load_run_source(make_run("superfed_mm"), 1).train
    device = DeviceTrainer.from_export(export)
    start = device.weights()
    device.personalize(rows.x[:40], rows.y[:40])
    first = device.weights()
    device.load_weights(start)
    device.personalize(rows.x[:40], rows.y[:40])
    assert all(torch.equal(first[k], w) for k, w in device.weights().items())


def test_a_stage_that_diverges_keeps_the_weights_it_started_from(export, make_run, tmp_path):
    folder = tmp_path / "copy"
    shutil.copytree(export, folder)
    card = json.loads((folder / "model_card.json").read_text())
    card["training"]["optimizers"][0]["lr"] = 1e30
    (folder / "model_card.json").write_text(json.dumps(card))
    rows = load_run_source(make_run("superfed_mm"), 1).train
    device = DeviceTrainer.from_export(folder)
    start = device.weights()
    with pytest.raises(TrainingProgramError, match="^training diverged: parameter .* is not "
                       "finite; the personal weights are kept as they were"):
        device.personalize(rows.x[:40], rows.y[:40])
    assert all(torch.equal(start[k], w) for k, w in device.weights().items())


def test_lambda_is_chosen_from_the_cards_grid(export, make_run, tmp_path):
    """The phone compares the card's lambda_grid; Python compared its own 0, 0.1, ..., 1."""
    folder = tmp_path / "copy"
    shutil.copytree(export, folder)
    card = json.loads((folder / "model_card.json").read_text())
    card["training"]["lambda_grid"] = [0.35]
    (folder / "model_card.json").write_text(json.dumps(card))
    rows = load_run_source(make_run("superfed_mm"), 1).train
    result = DeviceTrainer.from_export(folder).personalize(rows.x[:40], rows.y[:40])
    assert result.chosen["lambda"] == 0.35


def test_a_batch_the_program_cannot_take_is_one_line(export, make_run):
    """Session-level calls: were 'error: 0x10' from the runtime, a KeyError, or a NaN loss."""
    rows = load_run_source(make_run("superfed_mm"), 1).train
    device = DeviceTrainer.from_export(export)
    lam = device.recipe.lam.constant(0.5)

    def batch(n: int, dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, ...]:
        return (rows.x[:n].to(dtype), rows.y[:n], lam)

    for call, match in [(lambda: device.step("local", batch(65)), "a batch of 65 rows: the "
                         r"program takes 1..64 \(training.max_batch\)"),
                        (lambda: device.logits(batch(0)), "a batch of 0 rows"),
                        (lambda: device.step("nope", batch(4)), "no optimizer named 'nope'"),
                        (lambda: device.step("local", batch(4, torch.float64)),
                         "the program cannot run these inputs")]:
        with pytest.raises(TrainingProgramError, match=match) as err:
            call()
        assert "\n" not in str(err.value)
