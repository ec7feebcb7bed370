"""The inference role: a client's models (export, evaluation, the SDK client, the report).

A method's ``Inference`` class builds the generic model and a client's personalized model,
export's :class:`~pflkit.sdk.algorithms.inference.InferenceModel` for a user's
:class:`~pflkit.sdk.algorithms.inference.Choice` (checked against the :attr:`Inference.choices`
it declares) and the variants evaluation scores. Default: the global model for everyone.
"""

from __future__ import annotations

from typing import ClassVar

from torch import nn

from pflkit.sdk.algorithms.aggregators import State
from pflkit.sdk.algorithms.contract_types import ClientState
from pflkit.sdk.algorithms.inference import (
    Choice,
    ChoiceSpec,
    InferenceModel,
    check_choice,
    describe_choice,
)
from pflkit.sdk.algorithms.role import Role


class Inference(Role):
    """A method's models for inference; ``choices`` declares what a :class:`Choice` may hold."""

    choices: ClassVar[tuple[ChoiceSpec, ...]] = ()  # what inference_model's Choice may hold

    def personalized_model(self, global_state: State, client_state: ClientState,
                           choice: Choice | None = None) -> nn.Module:
        """The inference module for this client: images in, logits out (default: global)."""
        self._reject_choice(choice)
        return self.global_model(global_state)

    def inference_model(self, global_state: State, client_state: ClientState,
                        choice: Choice | None = None) -> InferenceModel:
        """Export's hook: the module for a user's choice, its outputs, the card's description.

        Default: ``head="generic"`` is :meth:`global_model`, anything else
        :meth:`personalized_model` with one ``logits`` output, described by the values the
        choice sets (checked against :attr:`choices`). Override it to add outputs, a runtime
        input or a richer description (docs/algorithms.md, "The algorithm contract").
        """
        choice = self.check_choice(choice)
        module = self.global_model(global_state) if choice.head == "generic" else \
            self.personalized_model(global_state, client_state, choice if choice.given else None)
        return InferenceModel(module, mixture=describe_choice(self.name, choice))

    def evaluation_choices(self, client_state: ClientState) -> dict[str, Choice | None]:
        """Named variants of a client's personalized model to score after the last round.

        The first entry is the headline number; SuPerFed adds one per lambda of its grid.
        """
        return {"": None}

    def global_model(self, global_state: State) -> nn.Module:
        """The generic (shared) model, for the global test set."""
        model = self.new_model()
        model.load_state_dict(global_state)
        return model.eval()

    def check_choice(self, choice: Choice | None) -> Choice:
        """``choice`` checked against :attr:`choices` (ValueError names the declared ones)."""
        return check_choice(self.name, self.choices, choice)

    def _reject_choice(self, choice: Choice | None) -> Choice:
        """Refuse what :attr:`choices` does not declare and the generic head; the checked choice."""
        choice = self.check_choice(choice)
        if choice.head != "personalized":
            raise ValueError(f"{self.name}: personalized_model builds the personalized head; "
                             f"the generic one is global_model")
        return choice
