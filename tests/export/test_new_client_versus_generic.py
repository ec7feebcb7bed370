"""A new client's export states its class-weighted accuracy beside the generic model's."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch
from typer.testing import CliRunner

from pflkit.export import export_model, load_run_source
from pflkit.export.cli import app
from pflkit.sdk.algorithms import ClientState
from pflkit.sdk.algorithms.inference import Choice
from pflkit.sdk.data.tensors import LabeledTensors
from pflkit.sdk.metrics import predict

ONLY = 3  # the one class of the skewed new client


def recall(model: torch.nn.Module, source, cls: int) -> float:
    """One-class counts weight only that class's rows: eq. 20 is its recall."""
    pred, y = predict(model, source.test).argmax(1), source.test.y
    return float((pred[y == cls] == cls).double().mean())


def plain(model: torch.nn.Module, source) -> float:
    return float((predict(model, source.test).argmax(1) == source.test.y).float().mean())


@pytest.mark.parametrize("option, text", [
    ("--class-counts", ",".join("7" if c == ONLY else "0" for c in range(10))),
    ("--proportions", ",".join("1" if c == ONLY else "0" for c in range(10))),
])
def test_one_class_new_client_card_scores_both_models_class_weighted(make_run, tmp_path,
                                                                    option, text):
    run = make_run("fedrod_hyper", new_clients=1)
    result = CliRunner().invoke(app, ["--run", str(run), option, text, "--format", "onnx",
                                      "--out", str(tmp_path / "o")])
    assert result.exit_code == 0, result.output
    card = json.loads((tmp_path / "o" / "model_card.json").read_text())
    source = load_run_source(run, None)
    inference = source.algorithm.inference
    counts = tuple(1.0 if c == ONLY else 0.0 for c in range(10))
    zero_shot = inference.personalized_model(source.global_state, ClientState(),
                                             Choice({"class_distribution": counts}))
    generic = inference.global_model(source.global_state)
    compared = card["versus_generic"]
    assert compared["test_rows"] == len(source.test)
    assert compared["exported"]["class_weighted_top1"] == pytest.approx(
        recall(zero_shot, source, ONLY))
    assert compared["generic"]["class_weighted_top1"] == pytest.approx(
        recall(generic, source, ONLY))
    assert compared["exported"]["test_top1"] == pytest.approx(plain(zero_shot, source))
    assert compared["generic"]["test_top1"] == pytest.approx(plain(generic, source))
    assert (f"new client, class-weighted by its distribution: exported "
            f"{compared['exported']['class_weighted_top1']:.4f}, generic "
            f"{compared['generic']['class_weighted_top1']:.4f}") in result.output
    parity = card["parity"][0]  # the artifact itself, in onnxruntime, next to the plain number
    assert parity["test_top1_artifact"] == pytest.approx(plain(zero_shot, source))
    assert parity["class_weighted_top1_artifact"] == pytest.approx(recall(zero_shot, source,
                                                                          ONLY))


def test_client_and_generic_exports_have_no_new_client_comparison(make_run, tmp_path):
    run = make_run("fedrod_hyper", new_clients=1)
    for args in (["--client", "1"], ["--head", "generic"]):
        out = tmp_path / args[-1]
        result = CliRunner().invoke(app, ["--run", str(run), *args, "--format", "onnx",
                                          "--out", str(out)])
        assert result.exit_code == 0, result.output
        card = json.loads((out / "model_card.json").read_text())
        assert "versus_generic" not in card and "class-weighted" not in result.output
        assert "class_weighted_top1_artifact" not in card["parity"][0]


def test_a_class_without_test_rows_is_null_not_a_failed_export(make_run, tmp_path):
    """Test rows (a user's own data) may lack the client's class: its score is undefined."""
    source = load_run_source(make_run("fedrod_hyper", new_clients=1), None)
    kept = source.test.y != ONLY
    source = dataclasses.replace(source, test=LabeledTensors(source.test.x[kept],
                                                             source.test.y[kept]))
    counts = tuple(1.0 if c == ONLY else 0.0 for c in range(10))
    card = export_model(source, Choice({"class_distribution": counts}), tmp_path / "o",
                        ["onnx"]).card
    assert card["versus_generic"]["exported"]["class_weighted_top1"] is None
    assert card["versus_generic"]["generic"]["class_weighted_top1"] is None
    assert card["parity"][0]["class_weighted_top1_artifact"] is None
    assert json.loads((tmp_path / "o" / "model_card.json").read_text()) == card
