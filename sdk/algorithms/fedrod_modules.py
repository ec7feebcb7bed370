"""The modules FedRoD trains and ships: one body, a generic head and a personalized head.

:class:`TwoHeadNet` is the training (and two-output inference) module; :class:`PersonalizedOnly`
the one-output inference contract; :class:`FrozenFeatures` and :class:`PersonalHeadProgram`
split it for a device that trains the personalized head alone (``ft_scope = "personal_head"``).
"""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from torch import nn

from pflkit.sdk.algorithms.base import State
from pflkit.sdk.algorithms.fedrod_hypernet import HyperNetwork
from pflkit.sdk.models import SplitModel


def initial_phi(phead: nn.Module) -> State:
    """phi_m before any training: ``phead``'s own init with its output layer zeroed.

    h_P(z) is then 0, so the personalized model starts equal to the generic one. Only the
    output layer (the last submodule owning parameters) is zeroed: in a head of several layers
    (lenet5's 400-120-84-C) zeroed throughout, ReLU(0) = 0 hides every weight from the
    gradient and h_P could only ever learn its last bias. A one-layer head starts at zero.
    """
    owners = [name for name, module in phead.named_modules()
              if any(True for _ in module.parameters(recurse=False))]
    output = f"{owners[-1]}." if owners and owners[-1] else ""
    return {name: torch.zeros_like(value) if name.startswith(output) else value.detach().clone()
            for name, value in phead.state_dict().items()}


class TwoHeadNet(nn.Module):
    """Shared body, generic head, personalized head: forward -> (personalized, generic) logits."""

    def __init__(self, split: SplitModel, hyper: HyperNetwork | None = None) -> None:
        super().__init__()
        self.body = split.body
        self.head = split.head
        self.phead = copy.deepcopy(split.head)
        if hyper is not None:
            self.hyper = hyper

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Personalized logits h_G(z) + h_P(z) and generic logits h_G(z), both (B, C)."""
        return self.logits_from_features(self.body(x))

    def logits_from_features(self, z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(personalized, generic) logits from body features z (B, D)."""
        generic = self.head(z)
        return generic + self.phead(z), generic


class PersonalizedOnly(nn.Module):
    """Images in, personalized logits out (the one-output inference contract)."""

    def __init__(self, net: TwoHeadNet) -> None:
        super().__init__()
        self.net = net

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Personalized logits (B, C)."""
        return self.net(x)[0]

    @property
    def body(self) -> nn.Module:
        """The shared body f (evaluation computes its features once for every client)."""
        return self.net.body

    def head_logits(self, x: torch.Tensor, features: torch.Tensor) -> torch.Tensor:
        """Personalized logits from the body's features."""
        return self.net.logits_from_features(features)[0]


class FrozenFeatures(nn.Module):
    """Images in, (features z, generic logits h_G(z)) out: what the personalized head reads."""

    def __init__(self, body: nn.Module, head: nn.Module) -> None:
        super().__init__()
        self.body = body
        self.head = head

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(B, D) features and (B, C) generic logits."""
        z = self.body(x)
        return z, self.head(z)


class PersonalHeadProgram(nn.Module):
    """L_m on frozen inputs: phi (``phi.*``, the client-state names) is the only parameter."""

    def __init__(self, phi: nn.Module) -> None:
        super().__init__()
        self.phi = phi

    def forward(self, features: torch.Tensor, generic_logits: torch.Tensor, label: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor]:
        """(loss, personalized logits h_G(z) + h_P(z)) of one batch."""
        logits = generic_logits + self.phi(features)  # (B, C)
        return F.cross_entropy(logits, label), logits.detach()
