"""The personalization role: the post-federation stage (the simulator, the SDK client, export).

After the last round a method may fine-tune or fit a personal part on each client
(:meth:`Personalization.personalize`), and may offer that stage as a trainable program a device
runs itself (:meth:`Personalization.personal_training`). Default: none.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pflkit.sdk.algorithms.aggregators import State
from pflkit.sdk.algorithms.contract_types import ClientState, RoundContext
from pflkit.sdk.algorithms.role import Role
from pflkit.sdk.data.tensors import LabeledTensors

if TYPE_CHECKING:
    from pflkit.sdk.algorithms.personal import PersonalTraining


class Personalization(Role):
    """A method's post-federation stage; called before evaluation and by on-device export."""

    def personalize(self, global_state: State, client_state: ClientState, data: LabeledTensors,
                    ctx: RoundContext) -> ClientState:
        """A post-federation stage (fine-tuning, PFL-MoE stage 2); default: none."""
        return client_state

    def personal_training(self, global_state: State, client_state: ClientState,
                          data: LabeledTensors, ctx: RoundContext) -> PersonalTraining | None:
        """The post-federation stage as a trainable personal part a device can run.

        None: the method has no such stage (or its configured stage trains federated weights).
        See :mod:`pflkit.sdk.algorithms.personal`.
        """
        return None

    @property
    def has_stage(self) -> bool:
        """Whether :meth:`personalize` does anything (the simulator runs it before evaluation)."""
        return type(self).personalize is not Personalization.personalize
