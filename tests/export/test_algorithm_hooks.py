"""Export knows no algorithm: everything comes through the method's ``inference_model``.

A method defined here, registered nowhere, declaring its own runtime choice (not ``lam``),
exports with parity and a card that describes it; one whose runtime input it does not declare
is refused (card readers find the input through the declared choice); a FedRoD client that never
trained exported with ``--client N`` names the class distribution its head comes from.
"""

from __future__ import annotations

import json
import math

import pytest
import torch
from torch import nn
from typer.testing import CliRunner

from pflkit.export import Choice, ExportError, export_model, load_run_source
from pflkit.export.cli import app
from pflkit.export.formats import FORMATS
from pflkit.export.source import Source
from pflkit.sdk.algorithms import (
    Algorithm,
    ClientState,
    Inference,
    LocalTraining,
    ModelFactory,
    RoundContext,
)
from pflkit.sdk.algorithms.fedavg import FedAvgTraining
from pflkit.sdk.algorithms.inference import (
    NUMBER,
    RUNTIME,
    ChoiceSpec,
    InferenceModel,
    Mixture,
    RuntimeInput,
)
from pflkit.sdk.data.datasets import load_dataset

LOW, HIGH, DEFAULT = 0.5, 2.0, 1.0
TEMPERATURE = ChoiceSpec("temperature", NUMBER, "divides the logits; 'runtime': an input",
                         LOW, HIGH, runtime=True, default=DEFAULT)


class Tempered(nn.Module):
    """Logits divided by ``fixed``, or by a temperature given at run time, clamped in the graph."""

    def __init__(self, model: nn.Module, fixed: float | None = None) -> None:
        super().__init__()
        self.model = model
        self.fixed = fixed

    def forward(self, x: torch.Tensor, temperature: torch.Tensor | None = None) -> torch.Tensor:
        if self.fixed is not None:
            return self.model(x) / self.fixed
        t = torch.where(torch.isnan(temperature), torch.full_like(temperature, DEFAULT),
                        temperature).clamp(LOW, HIGH)
        return self.model(x) / t


class TemperedInference(Inference):
    """FedAvg's model whose exported logits are divided by a temperature."""

    choices = (TEMPERATURE,)

    def inference_model(self, global_state, client_state, choice=None) -> InferenceModel:
        choice = self.check_choice(choice)
        t = choice.get(TEMPERATURE.name, TEMPERATURE.default)
        model = self.global_model(global_state)
        details = {"temperature_range": [LOW, HIGH]}
        if t == RUNTIME:
            return InferenceModel(Tempered(model), runtime_input=TEMPERATURE.runtime_input(DEFAULT),
                                  mixture=Mixture("tempered", "FedAvg's model, logits / "
                                                  "temperature", choice.to_card(), details))
        return InferenceModel(Tempered(model, t), mixture=Mixture(
            "tempered", f"FedAvg's model, logits / {t:g}", {TEMPERATURE.name: t}, details))


class TemperedFedAvg(Algorithm):
    """A user's method in one file: FedAvg whose exported model takes a temperature."""

    name = "tempered_fedavg"
    Training = FedAvgTraining
    Inference = TemperedInference


class UnmarkedInference(TemperedInference):
    """Declares the choice but its card does not mark it "runtime": no reader finds the input."""

    def inference_model(self, global_state, client_state, choice=None) -> InferenceModel:
        return InferenceModel(Tempered(self.global_model(global_state)),
                              runtime_input=RuntimeInput("temperature", LOW, HIGH, 1.0, 1.0),
                              mixture=Mixture("tempered", "logits / temperature"))


class Unmarked(TemperedFedAvg):
    """A method whose card does not mark its runtime choice."""

    name = "unmarked_fedavg"
    Inference = UnmarkedInference


class UndeclaredInference(UnmarkedInference):
    """Takes a runtime input it does not declare at all."""

    choices = ()


class Undeclared(Unmarked):
    """A method with an undeclared runtime input."""

    name = "undeclared_fedavg"
    Inference = UndeclaredInference


def _source(cls: type[Algorithm]) -> tuple[Source, dict[str, torch.Tensor]]:
    data = load_dataset("digits", None, None, seed=0)
    algorithm = cls(ModelFactory("twonn", data.spec.input_shape, data.spec.num_classes),
                    LocalTraining(epochs=1, batch_size=32), None)
    start = algorithm.aggregation.init_global(0)
    fit = algorithm.training.fit(start, ClientState(), data.train, RoundContext(0, 1, 0.05, 0, 0))
    return Source(algorithm, data.spec, fit.update, ClientState(), data.train, data.test,
                  {"client": None, "new_client": False, "test_data": "dataset test split"}), \
        fit.update


def test_a_method_unknown_to_pflkit_exports_with_parity_and_a_card(tmp_path):
    source, weights = _source(TemperedFedAvg)
    card = export_model(source, Choice({"temperature": RUNTIME}), tmp_path / "out").card
    assert card["algorithm"] == "tempered_fedavg"
    assert card["inputs"][1] == {"name": "temperature", "shape": [1], "dtype": "float32",
                                 "range": [LOW, HIGH], "default": DEFAULT, "nan": DEFAULT}
    assert card["mixture"] == {"kind": "tempered", "summary": "FedAvg's model, logits / "
                               "temperature", "choice": {"temperature": "runtime"},
                               "details": {"temperature_range": [LOW, HIGH]}}
    for entry in card["parity"]:
        assert entry["max_abs_diff"] <= 1e-4 and entry["runtime_input"] == "temperature"
        assert entry["values_checked"] == sorted([LOW, LOW + 0.37 * (HIGH - LOW), DEFAULT, HIGH])
    x = source.test.x[:16]
    plain = source.algorithm.inference.global_model(weights)
    for fmt in FORMATS.values():
        run = fmt.load(tmp_path / "out" / f"model.{fmt.suffix}")
        embedded = json.loads(fmt.embedded_card(tmp_path / "out" / f"model.{fmt.suffix}"))
        assert embedded["mixture"] == card["mixture"]
        with torch.no_grad():
            for t, same_as in ((1.5, 1.5), (9.0, HIGH), (math.nan, DEFAULT)):
                torch.testing.assert_close(run((x, torch.tensor([t])))[0],
                                           plain(x) / same_as, atol=1e-4, rtol=0)
    baked = export_model(source, Choice({"temperature": 1.5}), tmp_path / "baked",
                         ("onnx",)).card
    assert len(baked["inputs"]) == 1 and baked["mixture"]["choice"] == {"temperature": 1.5}
    with torch.no_grad():
        torch.testing.assert_close(FORMATS["onnx"].load(tmp_path / "baked" / "model.onnx")(
            (x,))[0], plain(x) / 1.5, atol=1e-4, rtol=0)
    with pytest.raises(ExportError, match="temperature must be a number in \\[0.5, 2\\]"):
        export_model(source, Choice({"temperature": 3.0}), tmp_path / "x", ("onnx",))


@pytest.mark.parametrize(("cls", "message"), [
    (Undeclared, "undeclared_fedavg: its runtime input 'temperature' is not a choice it "
                 "declares with runtime=True"),
    (Unmarked, "unmarked_fedavg: its model takes the input 'temperature', so its card's "
               "mixture.choice must mark 'temperature'"),
])
def test_a_runtime_input_not_declared_and_marked_runtime_is_refused(cls, message, tmp_path):
    source, _ = _source(cls)
    with pytest.raises(ExportError, match=message):
        export_model(source, Choice(), tmp_path / "out", ("onnx",))
    assert not (tmp_path / "out").exists()


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
    zero_shot = new.algorithm.inference.inference_model(new.global_state, ClientState(),
                                                        Choice.from_card(card["mixture"]["choice"]))
    x = new.test.x[:16]
    got = FORMATS["onnx"].load(tmp_path / "o" / "model.onnx")((x,))
    with torch.no_grad():
        for ref, out in zip(zero_shot.module(x), got, strict=True):
            torch.testing.assert_close(out, ref, atol=1e-4, rtol=0)
