"""How a method keeps several parts in one state: a name prefix per part.

A client state may hold several parts (FedRoD's ``phi.*`` and ``local.*``, PFL-MoE's
``personal.*`` and ``gate.*``) and a global state extras next to the model (FedRoD's
``hyper.*``, SCAFFOLD's ``control.*``). A part is read back with :func:`strip_prefix`, so the
model's own key names come out unchanged and load into the model as they are.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from pflkit.sdk.algorithms.base import ClientState, State

# A client's own copy of (part of) the model, under its model key names: FedAvg+FT's
# fine-tuned model, Ditto's v, APFL's local model, pFedMe's theta, PFL-MoE's classifier.
PERSONAL = "personal."


def strip_prefix(state: Mapping[str, torch.Tensor], prefix: str) -> State:
    """The tensors named ``prefix + key``, renamed ``key`` (the others are left out)."""
    return {k.removeprefix(prefix): v for k, v in state.items() if k.startswith(prefix)}


def add_prefix(state: Mapping[str, torch.Tensor], prefix: str) -> State:
    """``state`` renamed ``prefix + key``: how a part is stored next to others."""
    return {prefix + k: v for k, v in state.items()}


def personal_of(client_state: ClientState) -> State:
    """The client's :data:`PERSONAL` model tensors under their model names (empty: none yet)."""
    return strip_prefix(client_state.tensors, PERSONAL)
