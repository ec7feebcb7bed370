"""pfl-export end to end: every algorithm x format, runtime lambda, FedRoD zero-shot, int8."""

from __future__ import annotations

import dataclasses
import hashlib
import json

import pytest
import torch
from typer.testing import CliRunner

from pflkit.export import Choice, ExportError, export_model, load_run_source
from pflkit.export.cli import app
from pflkit.export.formats import FORMATS
from pflkit.export.golden import raw_images, raw_test_images
from pflkit.sdk.algorithms import ALGORITHMS, ClientState
from pflkit.sdk.data.tensors import LabeledTensors
from pflkit.sdk.state_store import DeviceStateStore

CLIENT = 1  # a training client of the conftest runs
REQUIRED = {"schema_version", "created", "algorithm", "model", "inputs", "outputs",
            "preprocessing", "classes", "mixture", "source", "artifacts", "parity"}


def eager_outputs(module: torch.nn.Module, *inputs: torch.Tensor) -> list[torch.Tensor]:
    with torch.no_grad():
        out = module(*inputs)
    return list(out) if isinstance(out, tuple) else [out]


def check_card(card: dict, out_dir) -> None:
    assert REQUIRED <= set(card)
    assert card["schema_version"] == "pflkit.model-card/2"
    assert card["inputs"][0] == {"name": "image", "shape": ["batch", 1, 8, 8],
                                 "dtype": "float32", "layout": "NCHW"}
    assert card["outputs"][0]["name"] == "logits" and card["outputs"][0]["meaning"] == "logits"
    assert card["classes"] == [str(i) for i in range(10)]
    for artifact in card["artifacts"]:
        data = (out_dir / artifact["file"]).read_bytes()
        assert artifact["sha256"] == hashlib.sha256(data).hexdigest()
        assert artifact["bytes"] == len(data)
        fmt = FORMATS.get(artifact["format"])
        if fmt is not None:  # the embedded card: without artifacts and parity, says its file
            embedded = json.loads(fmt.embedded_card(out_dir / artifact["file"]))
            assert embedded == {**card, "artifacts": [], "parity": [], "embedded_in": {
                "file": artifact["file"], "format": fmt.name,
                "precision": artifact["precision"]}}


@pytest.mark.parametrize("algorithm", sorted(ALGORITHMS))
def test_every_algorithm_exports_to_every_format_with_parity(algorithm, make_run, tmp_path):
    run = make_run(algorithm)
    source = load_run_source(run, CLIENT)
    result = export_model(source, Choice(), tmp_path / "out")
    card = json.loads((tmp_path / "out" / "model_card.json").read_text())
    assert card == result.card
    check_card(card, tmp_path / "out")
    assert card["algorithm"] == algorithm and card["source"]["client"] == CLIENT
    assert [a["format"] for a in card["artifacts"]] == ["onnx", "executorch"]
    for entry in card["parity"]:
        assert entry["max_abs_diff"] <= 1e-4 and entry["top1_agreement"] == 1.0
        assert entry["test_top1_artifact"] == entry["test_top1_eager"]
    # Reload independently and compare with the algorithm's own module on the client's rows.
    inference = source.algorithm.inference
    module = (inference.generic_and_personalized_model
              if hasattr(inference, "generic_and_personalized_model")
              else inference.personalized_model)(source.global_state, source.client_state,
                                                 None if algorithm[:8] != "superfed"
                                                 else Choice({"lam": "best"}))
    x = source.test.x[:20]
    expected = eager_outputs(module.eval(), x)
    assert [o["name"] for o in card["outputs"]] == \
        (["logits", "generic_logits"] if len(expected) == 2 else ["logits"])
    for name, fmt in FORMATS.items():
        got = fmt.load(tmp_path / "out" / f"model.{fmt.suffix}")((x,))
        for ref, out in zip(expected, got, strict=True):
            torch.testing.assert_close(out, ref, atol=1e-4, rtol=0, msg=name)
    # The card's generic description rebuilds the same model, whatever the method.
    mixture = card["mixture"]
    if mixture is not None:
        assert isinstance(mixture["kind"], str) and isinstance(mixture["summary"], str)
        assert isinstance(mixture["details"], dict)
    rebuilt = source.algorithm.inference.inference_model(
        source.global_state, source.client_state,
        Choice.from_card((mixture or {}).get("choice", {})))
    for ref, out in zip(expected, eager_outputs(rebuilt.module.eval(), x), strict=True):
        torch.testing.assert_close(out, ref, atol=0, rtol=0)


def test_superfed_runtime_lambda_equals_baked_lambda(make_run, tmp_path):
    run = make_run("superfed_mm")
    source = load_run_source(run, CLIENT)
    card = export_model(source, Choice({"lam": "runtime"}), tmp_path / "rt").card
    assert [i["name"] for i in card["inputs"]] == ["image", "lam"]
    assert card["mixture"]["choice"] == {"lam": "runtime"}
    assert card["mixture"]["details"]["mode"] == "mm"
    assert card["parity"][0]["values_checked"][0] == 0.0
    baked_card = export_model(source, Choice({"lam": 0.3}), tmp_path / "baked", ["onnx"]).card
    assert baked_card["mixture"]["choice"] == {"lam": 0.3}
    assert len(baked_card["inputs"]) == 1
    baked_onnx = FORMATS["onnx"].load(tmp_path / "baked" / "model.onnx")
    x = source.test.x[:16]
    for fmt in FORMATS.values():
        runtime = fmt.load(tmp_path / "rt" / f"model.{fmt.suffix}")
        for lam in (0.0, 0.3, 1.0):
            baked = source.algorithm.inference.personalized_model(
                source.global_state, source.client_state, Choice({"lam": lam}))
            got = runtime((x, torch.tensor([lam])))[0]
            torch.testing.assert_close(got, eager_outputs(baked, x)[0], atol=1e-4, rtol=0)
        torch.testing.assert_close(runtime((x, torch.tensor([0.3])))[0], baked_onnx((x,))[0],
                                   atol=1e-4, rtol=0)


def test_superfed_best_lambda_is_the_clients_choice(make_run, tmp_path):
    source = load_run_source(make_run("superfed_lm"), CLIENT)
    card = export_model(source, Choice({"lam": "best"}), tmp_path / "out", ["onnx"]).card
    chosen = source.client_state.meta["lambda"]
    assert card["mixture"]["choice"] == {"lam": chosen}
    assert card["mixture"]["details"] == {"mode": "lm", "chosen_lambda": chosen}
    assert "the client's choice" in card["mixture"]["summary"]


def test_fedrod_new_client_export_equals_zero_shot_model(make_run, tmp_path):
    source = load_run_source(make_run("fedrod_hyper"), None)
    counts = (5, 0, 12, 0, 0, 3, 0, 0, 9, 1)
    card = export_model(source, Choice({"class_distribution": torch.tensor(counts)}),
                        tmp_path / "out").card
    assert card["mixture"]["choice"] == {"class_distribution": [float(c) for c in counts]}
    assert card["source"]["new_client"] is True
    zero_shot = source.algorithm.inference.generic_and_personalized_model(
        source.global_state, ClientState(), Choice({"class_distribution": torch.tensor(counts)}))
    x = source.test.x[:16]
    expected = eager_outputs(zero_shot, x)
    for fmt in FORMATS.values():
        got = fmt.load(tmp_path / "out" / f"model.{fmt.suffix}")((x,))
        for ref, out in zip(expected, got, strict=True):
            torch.testing.assert_close(out, ref, atol=1e-4, rtol=0)


def test_fedrod_generic_head_is_the_global_model(make_run, tmp_path):
    source = load_run_source(make_run("fedrod_linear"), CLIENT)
    card = export_model(source, Choice(head="generic"), tmp_path / "out", ["onnx"]).card
    assert card["mixture"]["kind"] == "fedrod"
    assert card["mixture"]["choice"] == {"head": "generic"}
    assert [o["name"] for o in card["outputs"]] == ["logits"]
    x = source.test.x[:16]
    got = FORMATS["onnx"].load(tmp_path / "out" / "model.onnx")((x,))[0]
    torch.testing.assert_close(got, eager_outputs(
        source.algorithm.inference.global_model(source.global_state), x)[0], atol=1e-4, rtol=0)


def test_int8_keeps_top1_agreement_on_a_real_batch(make_run, tmp_path):
    source = load_run_source(make_run("fedavg"), CLIENT)
    card = export_model(source, Choice(), tmp_path / "out", int8=True, force_int8=True).card
    int8 = [e for e in card["parity"] if e["precision"] == "int8"]
    assert [e["file"] for e in int8] == ["model_int8.onnx", "model_int8.pte"]
    x = source.test.x[:32]
    reference = eager_outputs(source.algorithm.inference.personalized_model(
        source.global_state, source.client_state), x)[0].argmax(1)
    for entry in int8:
        fmt = FORMATS["onnx" if entry["file"].endswith("onnx") else "executorch"]
        pred = fmt.load(tmp_path / "out" / entry["file"])((x,))[0].argmax(1)
        assert (pred == reference).float().mean() >= 0.9
        assert entry["accuracy_drop_points"] == pytest.approx(
            100 * (entry["test_top1_eager"] - entry["test_top1_artifact"]))
    fp32, quant = (tmp_path / "out" / "model.onnx"), (tmp_path / "out" / "model_int8.onnx")
    assert quant.stat().st_size < fp32.stat().st_size
    check_card(card, tmp_path / "out")  # each file's embedded card names its own precision
    assert {a["file"]: a["precision"] for a in card["artifacts"]}["model_int8.pte"] == "int8"


def test_int8_above_the_drop_threshold_is_refused_and_nothing_is_written(make_run, tmp_path):
    source = load_run_source(make_run("fedavg"), CLIENT)
    # One absurd calibration pixel stretches the input's int8 range until every real image
    # quantizes to the same values: a real way to lose accuracy (bad calibration data).
    x = source.train.x.clone()
    x[0, 0, 0, 0] = 1e5
    spoiled = dataclasses.replace(source, train=LabeledTensors(x, source.train.y))
    with pytest.raises(ExportError, match="int8 loses .* use --force-int8"):
        export_model(spoiled, Choice(), tmp_path / "out", ["onnx"], int8=True)
    assert not (tmp_path / "out").exists() and list(tmp_path.iterdir()) == []


def test_golden_vectors_hold_real_pixels_and_eager_outputs(make_run, tmp_path):
    source = load_run_source(make_run("local"), CLIENT)
    export_model(source, Choice(), tmp_path / "out", ["onnx"], golden=3)
    golden = json.loads((tmp_path / "out" / "golden.json").read_text())
    assert golden["schema_version"] == "pflkit.golden/1" and golden["card"] == "model_card.json"
    raw, labels = raw_images(source, 3)
    assert labels.tolist() == source.test.y[:3].tolist()  # the client's own test rows
    model = source.algorithm.inference.personalized_model(source.global_state, source.client_state)
    for sample, pixels, label in zip(golden["samples"], raw, labels, strict=True):
        assert sample["label"] == int(label) and sample["raw_shape"] == [8, 8, 1]
        assert sample["raw"] == pixels.transpose(1, 2, 0).reshape(-1).tolist()
        assert all(float(v).is_integer() and 0 <= v <= 16 for v in sample["raw"])
        x = source.spec.preprocessing.apply(torch.tensor(pixels)[None])
        assert sample["input"] == pytest.approx(x.reshape(-1).tolist(), abs=1e-6)
        assert sample["logits"] == pytest.approx(eager_outputs(model, x)[0][0].tolist(), abs=1e-5)
        assert sample["top_k"][0][0] == int(torch.tensor(sample["logits"]).argmax())


def test_golden_refuses_a_dataset_without_integer_pixels():
    with pytest.raises(ExportError, match="no integer 0..255 raw pixels"):
        raw_test_images({"name": "synthetic", "seed": 0}, 2)


def test_device_state_folder_exports_like_the_run(make_run, tmp_path):
    run = make_run("fedavg_ft")
    from_run = load_run_source(run, CLIENT)
    DeviceStateStore(tmp_path / "app").save(from_run.client_state)
    result = CliRunner().invoke(app, [
        "--state-dir", str(tmp_path / "app"), "--global", str(run / "global" /
                                                              "latest.safetensors"),
        "--config", str(run / "config.toml"), "--format", "onnx", "--out", str(tmp_path / "o")])
    assert result.exit_code == 0, result.output
    card = json.loads((tmp_path / "o" / "model_card.json").read_text())
    assert card["source"]["state_dir"] == str(tmp_path / "app")
    assert card["source"]["test_data"] == "dataset test split"
    x = from_run.test.x[:8]
    got = FORMATS["onnx"].load(tmp_path / "o" / "model.onnx")((x,))[0]
    torch.testing.assert_close(got, eager_outputs(from_run.algorithm.inference.personalized_model(
        from_run.global_state, from_run.client_state), x)[0], atol=1e-4, rtol=0)
    shown = CliRunner().invoke(app, ["classify", str(tmp_path / "o"), "--count", "4"])
    assert shown.exit_code == 0, shown.output
    assert "all runtimes agree on top-1: yes" in shown.output


@pytest.mark.parametrize(("algorithm", "args", "message"), [
    ("fedavg_ft", ["--client", "99"], "unknown client 99"),
    ("superfed_mm", ["--client", "1", "--lambda", "1.5"],
     "--lambda: lam must be a number in [0, 1], 'best', 'runtime', got '1.5'"),
    ("superfed_mm", ["--client", "1", "--lambda", "abc"], "--lambda: lam must be a number"),
    ("superfed_mm", ["--client", "1", "--class-counts", "1,1,1,1,1,1,1,1,1,1"],
     "--class-counts: superfed_mm declares no choice it sets (superfed_mm's choices: lam)"),
    ("fedavg_ft", ["--client", "1", "--lambda", "0.3"],
     "--lambda: fedavg_ft declares no choice it sets (fedavg_ft's choices: none)"),
    ("fedrod_hyper", ["--class-counts", "1,2,3"], "10 entries"),
    ("fedrod_hyper", ["--client", "2", "--class-counts", "1,1,1,1,1,1,1,1,1,1"],
     "class_distribution builds a new client's model from its own choice, not client N's: "
     "give --client N or the distribution, not both"),  # the card claimed client 2's model
    ("fedrod_hyper", ["--class-counts", "0,0,0,0,0,0,0,0,0,0"], "all zero"),
    ("fedrod_hyper", ["--class-counts", "1,2", "--proportions", "0.5,0.5"],
     "--proportions and --class-counts both set class_distribution: give one"),
    ("superfed_mm", ["--head", "generic", "--lambda", "0.3"],
     "the generic model takes no choice (got lam)"),
    ("fedavg_ft", ["--head", "both"], "head must be one of personalized, generic"),
    ("fedavg_ft", ["--round", "7"], "no checkpoint of round 7"),
])
def test_clear_errors(make_run, tmp_path, algorithm, args, message):
    result = CliRunner().invoke(app, ["--run", str(make_run(algorithm)), *args,
                                      "--out", str(tmp_path / "o")])
    assert result.exit_code == 2
    assert message in " ".join(result.output.split())


def test_existing_output_needs_force(make_run, tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "keep.txt").write_text("x")
    args = ["--run", str(make_run("local")), "--client", "1", "--format", "onnx",
            "--out", str(tmp_path / "out")]
    refused = CliRunner().invoke(app, args)
    assert refused.exit_code == 2 and "use --force" in refused.output
    forced = CliRunner().invoke(app, [*args, "--force"])  # not an export: kept
    assert forced.exit_code == 2 and "is not a previous export" in forced.output
    (tmp_path / "out" / "keep.txt").unlink()
    assert CliRunner().invoke(app, args).exit_code == 0
    (tmp_path / "out" / "extra.txt").write_text("x")  # the user's file in an export: kept
    forced = CliRunner().invoke(app, [*args, "--force"])
    assert forced.exit_code == 2 and "holds extra.txt, which its model_card.json" in forced.output
    assert (tmp_path / "out" / "extra.txt").read_text() == "x"
    (tmp_path / "out" / "extra.txt").unlink()
    assert CliRunner().invoke(app, [*args, "--force"]).exit_code == 0  # an export: replaced
