"""The export's 20-step parity check refuses a recipe whose weights stop being finite.

NaN compares false with everything, so a NaN difference once passed ``diff > tolerance`` and a
diverging program was written as "within 0 of eager PyTorch"; it is now an export error that
says the recipe diverges and which weight.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from pflkit.export import ExportError, load_run_source
from pflkit.export.training_program import (
    PROGRAM_FILE,
    TrainerExport,
    program_bytes,
    relative_difference,
    trainer_export,
    training_section,
    verify_trainer,
)


def test_non_finite_weights_are_never_within_tolerance() -> None:
    want = {"w": torch.ones(3)}
    for bad in (float("nan"), float("inf")):
        assert relative_difference({"w": torch.tensor([1.0, bad, 1.0])}, want) == float("inf")
        assert relative_difference(want, {"w": torch.tensor([1.0, bad, 1.0])}) == float("inf")
    assert relative_difference(want, want) == 0


def test_a_diverging_recipe_fails_the_export_verification(make_run, tmp_path) -> None:
    source = load_run_source(make_run("fedrod_hyper"), 1)
    trainer = trainer_export(source, {"ft_epochs": 1, "ft_scope": "personal_head"})
    part = trainer.part
    recipe = dataclasses.replace(part.recipe, optimizers=tuple(
        dataclasses.replace(o, lr=1e30) for o in part.recipe.optimizers))
    part = dataclasses.replace(part, recipe=recipe)
    diverging = TrainerExport(part, training_section(part, trainer.image_shape,
                                                     source.train.x[:1]), trainer.image_shape)
    path = tmp_path / PROGRAM_FILE
    path.write_bytes(program_bytes(diverging, source.train.x[:32], source.train.y[:32], "{}"))
    with pytest.raises(ExportError, match="not finite") as err:
        verify_trainer(diverging, path, source)
    assert "\n" not in str(err.value), str(err.value)
