"""ScaledPrior: PriorShift whose bias strength is an inference choice of its own.

The method declares one choice, ``strength``, as it declares its hyperparameters: how much of
the client's logit bias the model adds (0: the shared model alone, 1: PriorShift's model). The
word ``"runtime"`` makes it a model input of the same name that an app can turn; the graph
clamps it into [0, 2] and reads NaN as 1. pflkit's export, card and verification know nothing
of it: they read the declaration and the card entries keyed by its name.
"""

from __future__ import annotations

import torch
from torch import nn

from pflkit.sdk.algorithms import ClientState, Inference, State
from pflkit.sdk.algorithms.inference import NUMBER, ChoiceSpec, InferenceModel, Mixture
from sensorkit.methods import BIAS, Biased, PriorShift

STRENGTH = ChoiceSpec("strength", NUMBER, "how much of the client's logit bias is added "
                      "(0: the shared model, 1: the client's own)", 0.0, 2.0, runtime=True,
                      default=1.0)


class ScaledBias(nn.Module):
    """``model(x) + strength * bias`` with ``strength`` an input: clamped, NaN -> default."""

    def __init__(self, model: nn.Module, bias: torch.Tensor) -> None:
        super().__init__()
        self.model = model
        self.register_buffer("bias", bias.detach().clone())

    def forward(self, x: torch.Tensor, strength: torch.Tensor) -> torch.Tensor:
        """Logits (B, C) for inputs (B, F) and a strength of shape (1,)."""
        s = torch.where(torch.isnan(strength), torch.full_like(strength, float(STRENGTH.default)),
                        strength).clamp(STRENGTH.low, STRENGTH.high)
        return self.model(x) + s * self.bias


class ScaledInference(Inference):
    """The shared model plus strength x the client's bias, strength a declared choice."""

    choices = (STRENGTH,)

    def _bias(self, client_state: ClientState) -> torch.Tensor:
        return client_state.tensors.get(BIAS, torch.zeros(self.model_factory.num_classes))

    def personalized_model(self, global_state: State, client_state: ClientState,
                           choice=None) -> nn.Module:
        """The inference module of :meth:`inference_model`."""
        return self.inference_model(global_state, client_state, choice).module

    def inference_model(self, global_state: State, client_state: ClientState,
                        choice=None) -> InferenceModel:
        """The shared model plus strength x the client's bias; strength baked or an input."""
        choice = self.check_choice(choice)
        if choice.head == "generic":
            return super().inference_model(global_state, client_state, choice)
        strength = choice.get(STRENGTH.name, STRENGTH.default)
        model = ScaledBias(self.global_model(global_state), self._bias(client_state)).eval()
        summary = "the shared model plus strength x the client's logit bias"
        if strength == "runtime":
            return InferenceModel(model, runtime_input=STRENGTH.runtime_input(STRENGTH.default),
                                  mixture=Mixture(self.name, summary, choice.to_card()))
        baked = Biased(model.model, strength * model.bias).eval()
        return InferenceModel(baked, mixture=Mixture(
            self.name, f"{summary}, strength = {strength:g}", {STRENGTH.name: strength}))


class ScaledPrior(PriorShift):
    """PriorShift with the bias strength chosen at export (baked) or on the device (runtime)."""

    name = "scaled_prior"
    Inference = ScaledInference
