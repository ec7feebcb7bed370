"""PriorShift: a fourth personalization method, written in one file outside pflkit.

The shared model is trained by federated averaging. Each client also learns a bias on the
logits (its own label prior, in the spirit of logit adjustment) with the shared model frozen,
and keeps it on the device: its personalized model is the shared model plus its bias. The
method names two roles of its own (device training, inference); the server's weighted mean
and "no post-federation stage" are the defaults.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from pflkit.sdk.algorithms import (
    Algorithm,
    Choice,
    ClientState,
    DeviceTraining,
    FitResult,
    Inference,
    RoundContext,
    State,
)
from pflkit.sdk.algorithms.paramcheck import LearningRate, Steps
from pflkit.sdk.data import LabeledTensors
from pflkit.sdk.models import float_state
from pflkit.sdk.training import cross_entropy_of, run_epochs, sgd

BIAS = "bias"  # client-state tensor: (num_classes,) logit bias


@dataclass(frozen=True)
class PriorShiftParams:
    """How the bias is learned each round: each setting's type and range declared once."""

    bias_steps: Steps = 20  # [1, 10000]: full-batch gradient steps on the bias per round
    bias_lr: LearningRate = 0.5  # (0, 10], as [training]'s lr


class Biased(nn.Module):
    """``model(x) + bias``: the personalized inference module."""

    def __init__(self, model: nn.Module, bias: torch.Tensor) -> None:
        super().__init__()
        self.model = model
        self.register_buffer("bias", bias.detach().clone())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits (B, C) for inputs (B, *input_shape)."""
        return self.model(x) + self.bias


class PriorShiftTraining(DeviceTraining):
    """FedAvg's local SGD for the model; the bias learned on the frozen new model, kept."""

    def init_client(self, client_id: int, seed: int, data: LabeledTensors) -> ClientState:
        """A zero bias."""
        return ClientState({BIAS: torch.zeros(self.model_factory.num_classes)})

    def fit(self, global_state: State, client_state: ClientState, data: LabeledTensors,
            ctx: RoundContext) -> FitResult:
        """Local SGD on the model (sent), then the bias on the frozen new model (kept)."""
        model = self.template(global_state)
        optimizer = sgd(model.parameters(), ctx.lr, self.local.momentum, self.local.weight_decay)
        loss = run_epochs(optimizer, cross_entropy_of(model), data, self.local.epochs,
                          self.local.batch_size, ctx.generator("batches"))
        with torch.no_grad():
            logits = model(data.x)
        bias = client_state.tensors[BIAS].clone().requires_grad_()
        bias_opt = torch.optim.SGD([bias], lr=self.params.bias_lr)
        for _ in range(self.params.bias_steps):
            bias_opt.zero_grad()
            F.cross_entropy(logits + bias, data.y).backward()
            bias_opt.step()
        state = ClientState({BIAS: bias.detach()})
        return FitResult(float_state(model), state, len(data), {"train_loss": loss})


class PriorShiftInference(Inference):
    """The shared model plus the client's bias."""

    def personalized_model(self, global_state: State, client_state: ClientState,
                           choice: Choice | None = None) -> nn.Module:
        """The shared model plus this client's bias (there is nothing to choose)."""
        self.check_choice(choice)  # declares no choices: any is refused, naming none
        bias = client_state.tensors.get(BIAS, torch.zeros(self.model_factory.num_classes))
        return Biased(self.global_model(global_state), bias).eval()


class PriorShift(Algorithm):
    """FedAvg for the model; a private logit bias per client."""

    name = "prior_shift"
    Params = PriorShiftParams
    Training = PriorShiftTraining
    Inference = PriorShiftInference
