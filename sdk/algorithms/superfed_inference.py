"""SuPerFed's personalized models: W(lambda) from a client's w_l and the global w_f.

:class:`SuPerFedInference` answers the inference-side hooks of the algorithm contract: the one
place a lambda choice is resolved and range-checked, the personalized model with lambda baked
in or as a runtime input, export's description of the mixture for the model card, and the
lambdas evaluation scores. :class:`~pflkit.sdk.algorithms.superfed.SuPerFed` composes it with
training and the lambda choice.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch
from torch import nn

from pflkit.sdk.algorithms.aggregators import State
from pflkit.sdk.algorithms.contract_types import ClientState
from pflkit.sdk.algorithms.inference import NUMBER, Choice, ChoiceSpec, InferenceModel, Mixture
from pflkit.sdk.algorithms.inference_role import Inference
from pflkit.sdk.algorithms.mixing import RuntimeMixture, mix_states
from pflkit.sdk.algorithms.recipe import LAMBDA_GRID
from pflkit.sdk.algorithms.state_layout import strip_prefix
from pflkit.sdk.data.tensors import LabeledTensors
from pflkit.sdk.metrics import Scores, predict, scores_from_logits

if TYPE_CHECKING:
    from pflkit.sdk.algorithms.superfed import SuPerFed

LOCAL = "local."  # client-state key prefix of w_l and the client's own running statistics
LAMBDA = ChoiceSpec(
    "lam", NUMBER, "the mixing weight of W(lambda) = (1 - lambda) w_f + lambda w_l: 'best' is "
    "the client's chosen one, 'runtime' makes it an input of the model (not given: the "
    "client's chosen one, else 0.5 once it has mixed, else 0)", 0.0, 1.0, ("best",),
    runtime=True, default="best", aliases=(("--lambda", ""),))


class SuPerFedInference(Inference):
    """W(lambda) for a client; the method's ``mixing`` only names the variant on the card."""

    method: SuPerFed
    choices = (LAMBDA,)

    def stored_lambda(self, client_state: ClientState) -> float | None:
        """The client's chosen lambda (None: none yet), refused unless a number in [0, 1].

        It comes from a file, so a damaged or edited one must not bake W(5) or NaN into a model.
        """
        if "lambda" not in client_state.meta:
            return None
        value = client_state.meta["lambda"]
        lam = float(value) if isinstance(value, int | float) and not isinstance(value, bool) \
            else math.nan
        if not 0.0 <= lam <= 1.0:  # also refuses NaN
            raise ValueError(f"{self.name}: the client state's stored lambda {value!r} is not a "
                             f"number in [0, 1]")
        return lam

    def default_lambda(self, client_state: ClientState) -> float:
        """The client's chosen lambda, else 0.5 once it has mixed, else 0 (w_f alone)."""
        lam = self.stored_lambda(client_state)
        if lam is not None:
            return lam
        return 0.5 if client_state.meta.get("mixed_rounds", 0) else 0.0

    def resolve_lambda(self, client_state: ClientState, lam: float | str | None
                       ) -> float | str:
        """A checked lambda choice (:data:`LAMBDA`) as a number in [0, 1] or "runtime".

        None is :meth:`default_lambda`; "best" the chosen lambda (an error before one is).
        """
        if lam is None:
            return self.default_lambda(client_state)
        if lam == "best":
            stored = self.stored_lambda(client_state)
            if stored is None:
                raise ValueError(f"{self.name}: no lambda chosen yet for this client (run "
                                 f"personalize first, or give a lambda)")
            return stored
        return lam if lam == "runtime" else float(lam)

    def personalized_model(self, global_state: State, client_state: ClientState,
                           choice: Choice | None = None) -> nn.Module:
        """W(lambda) as a plain module (a float or "best"), or ``forward(x, lam)`` ("runtime").

        No lambda: :meth:`default_lambda`. The runtime module clamps lam into [0, 1] and reads
        NaN as :meth:`default_lambda`.
        """
        return self.inference_model(global_state, client_state, choice).module

    def inference_model(self, global_state: State, client_state: ClientState,
                        choice: Choice | None = None) -> InferenceModel:
        """W(lambda) with lambda baked in, or as the runtime input ``lam``; the card's mixture."""
        choice = self.check_choice(choice)
        if choice.head == "generic":
            return super().inference_model(global_state, client_state, choice)
        asked = choice.get(LAMBDA.name)
        lam = self.resolve_lambda(client_state, asked)
        federated, local, names = self.endpoints(global_state, client_state)
        chosen = self.stored_lambda(client_state)
        details = {"mode": "mm" if self.method.mixing == "model" else "lm", "chosen_lambda": chosen}
        formula = "W(lambda) = (1 - lambda) w_f + lambda w_l"
        if lam == "runtime":
            default = self.default_lambda(client_state)
            module = RuntimeMixture(federated, local, names, default)
            return InferenceModel(
                module, runtime_input=LAMBDA.runtime_input(default),
                quantizable=module.two_endpoint, mixture=Mixture(
                    "superfed", f"{formula}, lambda an input in [0, 1] (default {default:g})",
                    {LAMBDA.name: "runtime"}, details))
        lam_t = torch.tensor([float(lam)], dtype=torch.float32, device=self.device)
        with torch.no_grad():
            federated.load_state_dict(mix_states(federated, local, names, lam_t), strict=False)
        origin = "the client's choice" if lam == chosen and asked in (None, "best") else \
            "given" if asked is not None else "default: no lambda chosen yet"
        return InferenceModel(federated, mixture=Mixture(
            "superfed", f"{formula} at lambda = {lam:g} ({origin})", {LAMBDA.name: lam}, details))

    def evaluation_choices(self, client_state: ClientState) -> dict[str, Choice | None]:
        """Score the chosen lambda first (the headline), then every lambda of the grid."""
        grid = LAMBDA_GRID if self.params.sweep else ()
        return {"best": Choice({LAMBDA.name: "best"})} | {
            f"{lam:.1f}": Choice({LAMBDA.name: lam}) for lam in grid}

    def endpoints(self, global_state: State, client_state: ClientState
                   ) -> tuple[nn.Module, nn.Module, list[str]]:
        """(w_f module, w_l module, names of the tensors that mix: parameters, float buffers)."""
        wl = strip_prefix(client_state.tensors, LOCAL)
        differ = sorted(set(wl) ^ {k for k, v in global_state.items() if v.is_floating_point()})
        if differ:
            raise ValueError(f"{self.name}: client state does not match the model "
                             f"(differs in {', '.join(differ[:5])})")
        local = self.global_model(global_state)
        local.load_state_dict(wl, strict=False)
        return self.global_model(global_state), local, list(wl)


def lambda_sweep(algorithm: SuPerFed, global_state: State, client_state: ClientState,
                 data: LabeledTensors) -> dict[float, Scores]:
    """Scores of W(lambda) on ``data`` for every lambda of the grid (choice, oracle, plots)."""
    return {lam: scores_from_logits(predict(algorithm.inference.personalized_model(
        global_state, client_state, Choice({LAMBDA.name: lam})), data), data.y)
        for lam in LAMBDA_GRID}
