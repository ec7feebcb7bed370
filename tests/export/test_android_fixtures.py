"""The Android core's committed fixtures still agree with pflkit's Python preprocessing.

The Java tests (``make android-core-test``) compare the core against these files; this test
guards the other side: if the Python preprocessing, the dataset registry or the softmax/top-k
convention changes, the fixtures must be regenerated (docs/android.md says how).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from pflkit.sdk.data.datasets import Preprocessing, dataset_spec

FIXTURES = Path(__file__).resolve().parents[2] / "android-demo/core/src/test/resources/fixtures"
CARD_DIRS = sorted(p.parent for p in FIXTURES.glob("*/model_card.json"))
TOL = 1e-6


def preprocessing(block: dict[str, Any]) -> Preprocessing:
    """The card's preprocessing block as the Python object that produced it."""
    return Preprocessing(block["channels"], tuple(block["size"]), tuple(block["mean"]),
                         tuple(block["std"]), block["pixel_scale"], block["resize"])


def apply_raw(pre: Preprocessing, raw: list[int], shape: list[int]) -> torch.Tensor:
    """HWC raw values -> the flattened NCHW input, as Preprocessing.apply computes it."""
    hwc = torch.tensor(raw, dtype=torch.float32).reshape(shape)
    return pre.apply(hwc.permute(2, 0, 1)[None]).flatten()


def load(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())


def test_there_are_fixtures_for_every_mixture_kind() -> None:
    kinds = {(load(d / "model_card.json")["mixture"] or {}).get("kind") for d in CARD_DIRS}
    assert {None, "superfed", "fedrod", "pflmoe"} <= kinds


@pytest.mark.parametrize("folder", CARD_DIRS, ids=lambda p: p.name)
def test_golden_vectors_match_python(folder: Path) -> None:
    card = load(folder / "model_card.json")
    golden = load(folder / "golden.json")
    pre = preprocessing(card["preprocessing"])
    if "dataset" in card:  # pfl-export names the dataset: its registry recipe must not drift
        assert pre == dataset_spec(card["dataset"], pre.size).preprocessing
    assert golden["schema_version"] == "pflkit.golden/1" and golden["samples"]
    for sample in golden["samples"]:
        x = apply_raw(pre, sample["raw"], sample["raw_shape"])
        assert torch.allclose(x, torch.tensor(sample["input"]), atol=TOL, rtol=0)
        logits = torch.tensor(sample["logits"], dtype=torch.float64)
        probs = torch.tensor(sample["probabilities"], dtype=torch.float64)
        assert torch.allclose(logits.softmax(0), probs, atol=TOL, rtol=0)
        for rank, (index, p) in enumerate(sample["top_k"]):
            assert p == pytest.approx(float(probs.sort(descending=True).values[rank]), abs=TOL)
            assert float(probs[index]) == pytest.approx(p, abs=TOL)
        assert ("lam" in sample) == any(i["name"] == "lam" for i in card["inputs"])


def test_preprocess_cases_match_python() -> None:
    cases = load(FIXTURES / "preprocess_cases.json")
    for case in cases["cases"]:
        x = apply_raw(preprocessing(case["preprocessing"]), case["raw"], case["raw_shape"])
        assert torch.allclose(x, torch.tensor(case["input"]), atol=TOL, rtol=0)
    assert len(cases["luma"]) >= 4


def test_the_safetensors_fixture_is_what_the_python_library_writes() -> None:
    """SafetensorsTest reads this file; it must hold exactly what make_fixtures documents."""
    import importlib.util
    import sys

    from safetensors import safe_open

    path = FIXTURES.parents[4] / "tools/make_fixtures.py"
    spec = importlib.util.spec_from_file_location("make_fixtures", path)
    assert spec is not None and spec.loader is not None
    tools = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = tools  # its dataclasses look their module up while being defined
    spec.loader.exec_module(tools)
    tensors, metadata = tools.safetensors_fixture()
    with safe_open(str(FIXTURES / "safetensors/python.safetensors"), "pt") as f:
        assert f.metadata() == metadata
        assert sorted(f.keys()) == sorted(tensors)
        for name, want in tensors.items():
            got = f.get_tensor(name)
            assert got.dtype == want.dtype and torch.equal(got, want)


TRAINER_DIRS = sorted(p.parent for p in FIXTURES.glob("trainer/*/model_card.json"))


@pytest.mark.parametrize("folder", TRAINER_DIRS, ids=lambda p: p.name)
def test_the_trainer_fixtures_are_recipes_pflkit_reads(folder: Path) -> None:
    """The Java RecipeRunner's fixtures: pflkit still reads their recipe and initial weights."""
    from pflkit.sdk.algorithms.recipe import Recipe
    from pflkit.sdk.tensorio import load_state

    section = load(folder / "model_card.json")["training"]
    recipe = Recipe.from_card(section)
    assert recipe.to_card().items() <= section.items()
    weights = load_state(folder / section["initial_weights"])
    assert {p["name"]: p["shape"] for p in section["parameters"]} == {
        n: list(t.shape) for n, t in weights.items()}
