"""pfl-export --trainer: the personal part as an ExecuTorch training program, run by DeviceTrainer.

The parity bar of issue 18: after 20 SGD steps on a client's real rows, the program's personal
weights in the ExecuTorch runtime equal eager PyTorch's within 1e-4 (relative), per method.
"""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch
from typer.testing import CliRunner

from pflkit.export import Choice, ExportError, export_model, load_run_source
from pflkit.export.cli import app
from pflkit.export.device_trainer import DeviceTrainer, TrainingProgramError
from pflkit.export.training_program import (
    PROGRAM_FILE,
    VERIFY_STEPS,
    WEIGHTS_FILE,
    relative_difference,
    trainer_export,
)
from pflkit.sdk.algorithms.fedrod import zero_shot_head
from pflkit.sdk.algorithms.personal import EagerSession, run_recipe
from pflkit.sdk.algorithms.superfed import LAMBDA_GRID
from pflkit.sdk.tensorio import load_state

CLIENT = 1
HEAD = {"ft_epochs": 1, "ft_scope": "personal_head"}
CASES = {  # one per method: (algorithm, trainer hyperparameters)
    "fedrod_hyper": ("fedrod_hyper", HEAD),
    "superfed_lm": ("superfed_lm", {"ft_epochs": 1}),
    "pflmoe_mfe": ("pflmoe", {}),
}


@pytest.fixture(scope="module")
def exported(make_run, tmp_path_factory):
    """``exported(case)`` -> (export folder, source, card), exported once per module."""
    done: dict[str, tuple] = {}

    def get(case: str):
        if case not in done:
            algorithm, params = CASES[case]
            source = load_run_source(make_run(algorithm), CLIENT)
            out = tmp_path_factory.mktemp(case) / "out"
            result = export_model(source, Choice(), out, ["executorch"], trainer=True,
                                  trainer_params=params)
            done[case] = out, source, result.card
        return done[case]

    return get


@pytest.mark.parametrize("case", sorted(CASES))
def test_program_trains_like_eager_pytorch_for_20_steps(case, exported):
    out, source, card = exported(case)
    device = DeviceTrainer.from_export(out)  # as an app loads it: card, .pte, safetensors
    part = trainer_export(source, CASES[case][1]).part  # the algorithm's stage, built afresh
    eager = EagerSession(part)
    recipe = dataclasses.replace(part.recipe, epochs=VERIFY_STEPS)
    start = device.weights()
    for session in (eager, device):
        assert run_recipe(recipe, session, source.train, part.rows, part.generator,
                          max_steps=VERIFY_STEPS).steps == VERIFY_STEPS
    got, want = device.weights(), eager.weights()
    assert sorted(got) == sorted(want) == sorted(p["name"] for p in card["training"]["parameters"])
    assert relative_difference(got, want) <= 1e-4
    assert relative_difference(got, start) > 1e-3  # the steps did train something
    entry = next(e for e in card["parity"] if e.get("kind") == "training")
    assert entry["steps"] == VERIFY_STEPS and entry["max_rel_weight_diff"] <= 1e-4
    # a pass the 20th step cuts short (here the first phase's) counts its steps so far
    first = card["training"]["schedule"]["phases"][0]["optimizer"]
    eager_loss, program_loss = entry["last_loss_eager"], entry["last_loss_program"]
    assert first in eager_loss and eager_loss.keys() == program_loss.keys()
    for name, loss in eager_loss.items():
        assert 0 < loss < 10 and program_loss[name] == pytest.approx(loss, rel=1e-4)


@pytest.mark.parametrize("case", sorted(CASES))
def test_card_files_and_embedded_card(case, exported):
    out, _, card = exported(case)
    section = card["training"]
    assert section["program"] == PROGRAM_FILE and section["initial_weights"] == WEIGHTS_FILE
    formats = {a["file"]: a["format"] for a in card["artifacts"]}
    assert formats[PROGRAM_FILE] == "executorch-training"
    assert formats[WEIGHTS_FILE] == "safetensors"
    weights = load_state(out / WEIGHTS_FILE)
    assert {p["name"]: p["shape"] for p in section["parameters"]} == \
        {k: list(v.shape) for k, v in weights.items()}
    assert [i["name"] for i in section["inputs"]][-1 if section["lambda"] is None else -2] == \
        "label"
    for opt in section["optimizers"]:
        assert opt["kind"] == "sgd" and set(opt["parameters"]) <= set(weights)
    from executorch.runtime import Runtime

    program = Runtime.get().load_program(out / PROGRAM_FILE)
    embedded = json.loads(bytes(program.load_method("model_card").execute([])[0].tolist()))
    assert embedded == {**card, "artifacts": [], "parity": [], "embedded_in": {
        "file": PROGRAM_FILE, "format": "executorch-training", "precision": "fp32"}}


def test_initial_weights_are_where_each_stage_starts(make_run):
    linear = load_run_source(make_run("fedrod_linear"), CLIENT)
    phi = trainer_export(linear, HEAD).part.initial_weights()
    assert all(torch.equal(v, linear.client_state.tensors[k]) for k, v in phi.items())
    hyper = load_run_source(make_run("fedrod_hyper"), CLIENT)
    counts = hyper.client_state.meta["class_counts"]
    generated = zero_shot_head(hyper.global_state, counts)  # H(a_m; nu-bar)
    got = trainer_export(hyper, HEAD).part.initial_weights()
    assert all(torch.equal(got[f"phi.{k}"], v) for k, v in generated.items())
    superfed = load_run_source(make_run("superfed_mm"), CLIENT)
    local = trainer_export(superfed, {"ft_epochs": 1}).part.initial_weights()
    assert local and all(torch.equal(v, superfed.client_state.tensors[k])
                         for k, v in local.items())
    moe = load_run_source(make_run("pflmoe"), CLIENT)
    start = trainer_export(moe).part.initial_weights()
    assert all(torch.equal(start[f"personal.{k}"], moe.global_state[k])
               for k in moe.global_state if k.startswith("head."))
    assert not start["gate.weight"].any() and not start["gate.bias"].any()


def test_device_personalization_feeds_the_algorithms_own_model(exported):
    out, source, _ = exported("superfed_lm")
    device = DeviceTrainer.from_export(out)
    result = device.personalize(source.train.x, source.train.y, seed=3)
    assert result.chosen["lambda"] in LAMBDA_GRID and result.steps > 0
    # The trained weights in the client state give the model the program predicts with.
    state = dataclasses.replace(source.client_state,
                                tensors={**source.client_state.tensors, **device.weights()},
                                meta={**source.client_state.meta, **result.chosen})
    model = source.algorithm.inference.personalized_model(source.global_state, state)
    x = source.test.x[:16]
    lam = device.recipe.lam.constant(result.chosen["lambda"])
    got = device.logits((x, torch.zeros(16, dtype=torch.long), lam))
    with torch.no_grad():
        torch.testing.assert_close(got, model(x), atol=1e-4, rtol=0)


def test_weights_round_trip_and_bad_weights_are_refused(exported, tmp_path):
    out, _, _ = exported("fedrod_hyper")
    device = DeviceTrainer.from_export(out)
    device.save_weights(tmp_path / "w.safetensors")
    saved = load_state(tmp_path / "w.safetensors")
    assert relative_difference(saved, load_state(out / WEIGHTS_FILE)) == 0
    with pytest.raises(TrainingProgramError, match="lack phi.bias"):
        device.load_weights({"phi.weight": saved["phi.weight"]})
    with pytest.raises(TrainingProgramError, match="phi.bias has shape"):
        device.load_weights({**saved, "phi.bias": torch.zeros(3)})


def test_cli_writes_the_trainer_next_to_the_inference_files(make_run, tmp_path):
    result = CliRunner().invoke(app, [
        "--run", str(make_run("superfed_mm")), "--client", str(CLIENT), "--format", "onnx",
        "--trainer", "--trainer-param", "ft_epochs=2", "--out", str(tmp_path / "o")])
    assert result.exit_code == 0, result.output
    assert "personal_train.pte" in result.output and "SGD steps" in result.output
    names = sorted(p.name for p in (tmp_path / "o").iterdir())
    assert names == sorted(["model.onnx", "model_card.json", PROGRAM_FILE, WEIGHTS_FILE])
    card = json.loads((tmp_path / "o" / "model_card.json").read_text())
    assert card["training"]["schedule"]["epochs"] == 2
    assert card["training"]["lambda"]["layer_of"] is None  # model mixing: one shared draw


@pytest.mark.parametrize(("algorithm", "params", "message"), [
    ("fedavg_ft", [], "no post-federation stage a device can run"),
    ("fedrod_linear", [], "no post-federation stage a device can run"),
    ("pflmoe", ["gate_optimizer=adam"], "SGD only"),
    ("superfed_mm", ["ft_epochs=-1"], "'ft_epochs' must be in [0, 1000], got -1"),
    ("superfed_mm", ["--head", "generic"], "give --client N"),
    ("fedrod_hyper", ["--class-counts", "1,2,3,4,5,6,7,8,9,10"], "give --client N"),
])
def test_trainer_errors_are_one_line(make_run, algorithm, params, message, tmp_path):
    args = ["--run", str(make_run(algorithm)), "--format", "onnx", "--trainer",
            "--out", str(tmp_path / "o")]
    args += params if params[:1] and params[0].startswith("--") else \
        ["--client", str(CLIENT), *(a for item in params for a in ("--trainer-param", item))]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2
    assert message in " ".join(result.output.split())
    assert not (tmp_path / "o").exists()  # nothing half-written


def test_export_error_for_no_training_rows(make_run):
    source = load_run_source(make_run("pflmoe"), CLIENT)
    empty = dataclasses.replace(source, train=source.train.subset(torch.arange(0)))
    with pytest.raises(ExportError, match="no training rows"):
        export_model(empty, Choice(), source.info["run"] + "/x", ["onnx"], trainer=True)


@pytest.mark.parametrize(("algorithm", "model", "params"), [
    ("pflmoe", "twonn", {"variant": "fb", "epochs": 1}),  # one optimizer, no gate
    ("pflmoe", "twonn", {"variant": "mf", "epochs": 1}),  # the gate reads the raw image
    ("superfed_mm", "twocnn", {"ft_epochs": 1}),  # convolutions in the joint graph
    ("fedrod_linear", "twocnn", HEAD),  # convolutions in prepare (XNNPACK)
])
def test_variants_and_conv_models_train_like_eager(algorithm, model, params):
    """Lowering and the runtime beyond the run-based cases: other variants, conv nets."""
    from pflkit.export.training_program import (
        TrainerExport,
        device_stage,
        program_bytes,
        training_section,
    )
    from pflkit.sdk.algorithms import LocalTraining, ModelFactory, RoundContext, make_algorithm
    from pflkit.sdk.data.datasets import load_dataset

    rows = load_dataset("digits", seed=0).train
    data = rows.subset(torch.arange(200))  # real rows, one client's worth
    algo = make_algorithm(algorithm, ModelFactory(model, (1, 8, 8), 10),
                          LocalTraining(1, 16, 0.9, 1e-4), params)
    glob = algo.aggregation.init_global(0)
    part = device_stage(algo, glob, algo.training.init_client(3, 0, data), data,
                        RoundContext(2, 2, 0.05, 0, 3))
    trainer = TrainerExport(part, training_section(part, (1, 8, 8), data.x[:1]), (1, 8, 8))
    device = DeviceTrainer(program_bytes(trainer, data.x[:32], data.y[:32], "{}"),
                           trainer.section, (1, 8, 8))
    device.load_weights(part.initial_weights())
    eager = EagerSession(part)
    recipe = dataclasses.replace(part.recipe, epochs=VERIFY_STEPS)
    for session in (eager, device):
        run_recipe(recipe, session, data, part.rows, part.generator, max_steps=VERIFY_STEPS)
    assert relative_difference(device.weights(), eager.weights()) <= 1e-4
    assert relative_difference(device.weights(), part.initial_weights()) > 1e-3
