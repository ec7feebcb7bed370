"""A training program's batches and card, as an app hands them in, are checked before they act.

The ExecuTorch runtime takes a NaN row or a lambda outside [0, 1] without a word, and the next
SGD step makes every personal weight NaN (``save_weights`` would then write them): the low-level
``step`` and ``logits`` are refused first, as ``personalize`` refuses its rows.
"""

from __future__ import annotations

import math
import re
import shutil
from pathlib import Path

import pytest
import torch
from test_bad_inputs import export
from test_export_folder_trust import pad_card

from pflkit.export import load_run_source
from pflkit.export.card_file import MAX_CARD_BYTES
from pflkit.export.device_trainer import DeviceTrainer
from pflkit.export.training_section import TrainingProgramError

CLIENT = 1


@pytest.fixture(scope="module")
def superfed(make_run, tmp_path_factory) -> tuple[Path, Path]:
    """(run, its SuPerFed-MM trainer export): the program takes images, labels and ``lam``."""
    run, out = make_run("superfed_mm"), tmp_path_factory.mktemp("trainer") / "app"
    code, output = export("--run", str(run), "--client", str(CLIENT), "--format", "executorch",
                          "--trainer", "--trainer-param", "ft_epochs=1", "--out", str(out))
    assert code == 0, output
    return run, out


def _batch(run: Path) -> tuple[torch.Tensor, torch.Tensor]:
    rows = load_run_source(run, CLIENT).train
    return rows.x[:8], rows.y[:8]


@pytest.mark.parametrize(("edit", "message"), [
    (lambda x, y, lam: (x, y, torch.full_like(lam, math.nan)),
     "input 'lam' must be finite floating-point values"),
    (lambda x, y, lam: (x, y, torch.full_like(lam, 5.0)),
     "input 'lam': every entry must be a lambda in [0, 1], got 5..5"),
    (lambda x, y, lam: (x, y, torch.cat([lam[:-1], torch.tensor([-0.5])])),
     "every entry must be a lambda in [0, 1], got -0.5..0.5"),
    (lambda x, y, lam: (torch.full_like(x, math.inf), y, lam),
     "input 'image' must be finite floating-point values"),
    (lambda x, y, lam: (x, torch.full_like(y, 10), lam), "label 10 is not a class of this program"),
    (lambda x, y, lam: (x, y), "2 inputs, the program takes 3 (image, label, lam"),
])
def test_a_step_on_a_batch_the_program_cannot_learn_from_changes_no_weight(superfed, edit,
                                                                           message):
    run, folder = superfed
    trainer = DeviceTrainer.from_export(folder)
    x, y = _batch(run)
    before = trainer.weights()
    for call in (lambda inputs: trainer.step("local", inputs), trainer.logits):
        with pytest.raises(TrainingProgramError, match=re.escape(message)):
            call(edit(x, y, trainer.recipe.lam.constant(0.5)))
    assert all(torch.equal(before[n], w) for n, w in trainer.weights().items())
    trainer.step("local", (x, y, trainer.recipe.lam.constant(0.5)))  # a good batch still trains
    assert all(bool(torch.isfinite(w).all()) for w in trainer.weights().values())


def test_a_trainer_card_larger_than_a_card_is_refused(superfed, tmp_path):
    folder = Path(shutil.copytree(superfed[1], tmp_path / "copy"))
    pad_card(folder, MAX_CARD_BYTES)
    with pytest.raises(TrainingProgramError, match="too large for a model card"):
        DeviceTrainer.from_export(folder)
