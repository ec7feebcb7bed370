"""Export knows no algorithm: everything comes through ``Algorithm.inference_model``.

A method defined here, registered nowhere, with its own runtime input (not ``lam``), exports
with parity and a card that describes it; a FedRoD client that never trained exported with
``--client N`` names the class distribution its head comes from.
"""

from __future__ import annotations

import json
import math

import torch
from torch import nn
from typer.testing import CliRunner

from pflkit.export import Choice, export_model, load_run_source
from pflkit.export.cli import app
from pflkit.export.formats import FORMATS
from pflkit.export.source import Source
from pflkit.sdk.algorithms import ClientState, LocalTraining, ModelFactory, RoundContext
from pflkit.sdk.algorithms.fedavg import FedAvg
from pflkit.sdk.algorithms.inference import InferenceModel, Mixture, RuntimeInput
from pflkit.sdk.data.datasets import load_dataset

LOW, HIGH, DEFAULT = 0.5, 2.0, 1.0


class Tempered(nn.Module):
    """Logits divided by a temperature given at run time, clamped in the graph."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, x: torch.Tensor, temperature: torch.Tensor) -> torch.Tensor:
        t = torch.where(torch.isnan(temperature), torch.full_like(temperature, DEFAULT),
                        temperature).clamp(LOW, HIGH)
        return self.model(x) / t


class TemperedFedAvg(FedAvg):
    """A user's method in one file: FedAvg whose exported model takes a temperature."""

    name = "tempered_fedavg"

    def inference_model(self, global_state, client_state, choice=None) -> InferenceModel:
        model = super().inference_model(global_state, client_state, choice)
        return InferenceModel(
            Tempered(model.module), runtime_input=RuntimeInput("temperature", LOW, HIGH,
                                                               DEFAULT, DEFAULT),
            mixture=Mixture("tempered", "FedAvg's model, logits / temperature", {},
                            {"temperature_range": [LOW, HIGH]}))


def test_a_method_unknown_to_pflkit_exports_with_parity_and_a_card(tmp_path):
    data = load_dataset("digits", None, None, seed=0)
    algorithm = TemperedFedAvg(ModelFactory("twonn", data.spec.input_shape,
                                            data.spec.num_classes),
                               LocalTraining(epochs=1, batch_size=32), None)
    start = algorithm.init_global(0)
    fit = algorithm.fit(start, ClientState(), data.train, RoundContext(0, 1, 0.05, 0, 0))
    source = Source(algorithm, data.spec, fit.update, ClientState(), data.train, data.test,
                    {"client": None, "new_client": False, "test_data": "dataset test split"})
    card = export_model(source, Choice(), tmp_path / "out").card
    assert card["algorithm"] == "tempered_fedavg"
    assert card["inputs"][1] == {"name": "temperature", "shape": [1], "dtype": "float32",
                                 "range": [LOW, HIGH], "default": DEFAULT, "nan": DEFAULT}
    assert card["mixture"] == {"kind": "tempered", "summary": "FedAvg's model, logits / "
                               "temperature", "choice": {},
                               "details": {"temperature_range": [LOW, HIGH]}}
    for entry in card["parity"]:
        assert entry["max_abs_diff"] <= 1e-4
        assert entry["values_checked"] == sorted([LOW, LOW + 0.37 * (HIGH - LOW), DEFAULT, HIGH])
    x = data.test.x[:16]
    plain = algorithm.global_model(fit.update)
    for fmt in FORMATS.values():
        run = fmt.load(tmp_path / "out" / f"model.{fmt.suffix}")
        embedded = json.loads(fmt.embedded_card(tmp_path / "out" / f"model.{fmt.suffix}"))
        assert embedded["mixture"] == card["mixture"]
        with torch.no_grad():
            for t, same_as in ((1.5, 1.5), (9.0, HIGH), (math.nan, DEFAULT)):
                torch.testing.assert_close(run((x, torch.tensor([t])))[0],
                                           plain(x) / same_as, atol=1e-4, rtol=0)


def test_a_new_fedrod_client_exported_by_id_names_its_class_distribution(make_run, tmp_path):
    run = make_run("fedrod_hyper", new_clients=1)
    new = load_run_source(run, 0)  # the partition makes client 0 the new one
    assert new.info["new_client"] is True and not new.client_state.tensors
    counts = new.client_state.meta["class_counts"]
    result = CliRunner().invoke(app, ["--run", str(run), "--client", "0",
                                      "--format", "onnx", "--out", str(tmp_path / "o")])
    assert result.exit_code == 0, result.output
    card = json.loads((tmp_path / "o" / "model_card.json").read_text())
    assert card["source"]["new_client"] is True
    assert card["mixture"]["choice"] == {"class_distribution": [float(c) for c in counts]}
    # the card's choice alone (no client state) rebuilds the exported model
    zero_shot = new.algorithm.inference_model(new.global_state, ClientState(),
                                              Choice.from_card(card["mixture"]["choice"]))
    x = new.test.x[:16]
    got = FORMATS["onnx"].load(tmp_path / "o" / "model.onnx")((x,))
    with torch.no_grad():
        for ref, out in zip(zero_shot.module(x), got, strict=True):
            torch.testing.assert_close(out, ref, atol=1e-4, rtol=0)
