"""What every role of a method shares: the method it belongs to, and the method's settings.

A method (:class:`~pflkit.sdk.algorithms.base.Algorithm`) is composed of four roles, each its
own class: device training, server aggregation, personalization and inference. The method
builds one of each with itself; a role reads the settings through it and reaches another role
as ``self.method.training`` (and so on), so a family's roles share one model template.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from pflkit.sdk.algorithms.aggregators import State
from pflkit.sdk.algorithms.contract_types import LocalTraining, ModelFactory
from pflkit.sdk.models import SplitModel

if TYPE_CHECKING:
    from pflkit.sdk.algorithms.base import Algorithm


class Role:
    """One part of a method's contract, bound to the method that built it."""

    def __init__(self, method: Algorithm) -> None:
        self.method = method

    @property
    def name(self) -> str:
        """The method's name (errors, metrics and model cards use it)."""
        return self.method.name

    @property
    def params(self) -> Any:
        """The method's validated hyperparameters (its ``Params``)."""
        return self.method.params

    @property
    def local(self) -> LocalTraining:
        """The client-side SGD settings."""
        return self.method.local

    @property
    def model_factory(self) -> ModelFactory:
        """The architecture, for rebuilding the template anywhere."""
        return self.method.model_factory

    @property
    def device(self) -> torch.device:
        """Where modules are trained and built (:meth:`Algorithm.to <.base.Algorithm.to>`)."""
        return self.method.device

    def new_model(self, seed: int = 0) -> SplitModel:
        """A fresh model on the method's device."""
        return self.method.new_model(seed)

    def template(self, state: State) -> SplitModel:
        """The method's reusable training module loaded with ``state``."""
        return self.method.template(state)
