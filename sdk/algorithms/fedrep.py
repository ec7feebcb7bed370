"""FedRep (Collins et al. 2021): personal head trained first, then the shared representation.

Per round, with the global body and the client's own head: (1) train the head for
``E - body_epochs`` epochs with the body frozen, (2) train the body for ``body_epochs`` epochs
with the head frozen (a fresh optimizer per phase), send the body, keep the head.

Choice: the paper describes tau_h head epochs plus one body epoch; the public code spends the
round's E epochs as ``E - local_rep_ep`` head epochs and ``local_rep_ep`` (default 1) body
epochs. This project does the same so that E means the same total work for every method.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from pflkit.sdk.algorithms.base import (
    FitJob,
    LocalTraining,
    ModelFactory,
    RoundContext,
    register,
)
from pflkit.sdk.algorithms.fedper import PartialSharing, PartialTraining, train_params_together
from pflkit.sdk.algorithms.gradtools import frozen
from pflkit.sdk.algorithms.paramcheck import Epochs, require
from pflkit.sdk.batched_training import Stacked
from pflkit.sdk.data.tensors import LabeledTensors
from pflkit.sdk.models import SplitModel


@dataclass(frozen=True)
class FedRepParams:
    """How a round's E local epochs are split between head and body."""

    body_epochs: Epochs = 1  # epochs on the representation, after E - body_epochs head epochs


class FedRepTraining(PartialTraining):
    """Head epochs first with the body frozen, then body epochs with the head frozen."""

    def train_round(self, model: SplitModel, data: LabeledTensors, ctx: RoundContext) -> float:
        """Head with the body frozen, then body with the head frozen."""
        head_epochs = self.local.epochs - self.params.body_epochs
        body = list(model.body.parameters())
        head = list(model.head.parameters())
        with frozen(body):
            head_loss = self.train_params(model, head, data, head_epochs, ctx, "head")
        with frozen(head):
            body_loss = self.train_params(model, body, data, self.params.body_epochs, ctx, "body")
        return body_loss if self.params.body_epochs else head_loss

    def train_round_together(self, model: SplitModel, start: Stacked, jobs: Sequence[FitJob]
                             ) -> tuple[Stacked, torch.Tensor]:
        """:meth:`train_round` for a round's clients: each phase a fresh batched SGD."""
        body_epochs = self.params.body_epochs
        head = [f"head.{n}" for n, _ in model.head.named_parameters()]
        body = [f"body.{n}" for n, _ in model.body.named_parameters()]
        start, head_loss = train_params_together(model, start, head, jobs, self.local,
                                                 self.local.epochs - body_epochs, "head")
        start, body_loss = train_params_together(model, start, body, jobs, self.local,
                                                 body_epochs, "body")
        return start, body_loss if body_epochs else head_loss


@register
class FedRep(PartialSharing):
    """Personal head, shared body; head epochs first, then body epochs."""

    name = "fedrep"
    Params = FedRepParams
    params: FedRepParams
    personal_prefixes = ("head.",)
    Training = FedRepTraining

    def __init__(self, model: ModelFactory, local: LocalTraining, params: Any = None) -> None:
        super().__init__(model, local, params or FedRepParams())

    @classmethod
    def check_local(cls, params: Any, local: LocalTraining) -> None:
        """The body's epochs are the last ``body_epochs`` of the E local ones."""
        params = params or FedRepParams()
        require("fedrep", "body_epochs", params.body_epochs <= local.epochs,
                f"<= the local epochs E ({local.epochs})", params.body_epochs)
