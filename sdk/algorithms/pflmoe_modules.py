"""PFL-MoE's modules: the gated mixture of experts, and stage 2's programs.

:class:`GatedExperts` is the PFL-MF / -MFE inference model; :class:`FrozenExperts` computes what
stage 2 reads from the frozen extractor and classifier, :class:`ClassifierProgram` (PFL-FB) and
:class:`GatedProgram` (MF / MFE) train on it (:mod:`~pflkit.sdk.algorithms.pflmoe`).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def mix_experts(g: torch.Tensor, global_logits: torch.Tensor,
                personal_logits: torch.Tensor) -> torch.Tensor:
    """Eq. 15: ``g * C(a) + (1 - g) * C_i(a)``; ``g`` (B, 1) weighs the global expert."""
    return g * global_logits + (1 - g) * personal_logits


def gate_value(gate: nn.Linear, u: torch.Tensor) -> torch.Tensor:
    """``sigmoid(Linear(u))``: (B, 1) weights of the global expert, in (0, 1)."""
    return torch.sigmoid(gate(u))


class GatedExperts(nn.Module):
    """The PFL-MF / PFL-MFE inference model: images in, mixed logits out."""

    def __init__(self, body: nn.Module, global_head: nn.Module, personal_head: nn.Module,
                 gate: nn.Linear, gate_on_features: bool) -> None:
        super().__init__()
        self.body = body
        self.global_head = global_head
        self.personal_head = personal_head
        self.gate = gate
        self.gate_on_features = gate_on_features

    def gate_input(self, x: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
        """Pick the gate's input: the activations a (MFE) or the flattened raw input (MF)."""
        return a if self.gate_on_features else x.flatten(1)  # (B, D) or (B, C*H*W)

    def head_logits(self, x: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
        """Mixed logits from inputs x and their activations ``a = body(x)`` (reusable a)."""
        g = gate_value(self.gate, self.gate_input(x, a))
        return mix_experts(g, self.global_head(a), self.personal_head(a))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Mixed logits (B, num_classes) for inputs (B, C, H, W)."""
        return self.head_logits(x, self.body(x))  # body(x): (B, feature_dim)


class FrozenExperts(nn.Module):
    """Images in, what stage 2 reads out: activations a, global logits C(a), the gate input.

    PFL-FB: ``(a,)``; PFL-MF / -MFE: ``(a, C(a), u)`` with u = the flattened x or a.
    """

    def __init__(self, body: nn.Module, head: nn.Module, variant: str) -> None:
        super().__init__()
        self.body = body
        self.head = head
        self.variant = variant

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """Frozen per-row tensors of a batch of images."""
        a = self.body(x)  # (B, feature_dim)
        if self.variant == "fb":
            return (a,)
        return a, self.head(a), a if self.variant == "mfe" else x.flatten(1)


class ClassifierProgram(nn.Module):
    """PFL-FB: ``personal.head.*`` trained with cross-entropy on frozen activations."""

    def __init__(self, head: nn.Module) -> None:
        super().__init__()
        self.personal = nn.ModuleDict({"head": head})

    def forward(self, features: torch.Tensor, label: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor]:
        """(loss, personal logits)."""
        logits = self.personal["head"](features)  # (B, C)
        return F.cross_entropy(logits, label), logits.detach()


class GatedProgram(ClassifierProgram):
    """PFL-MF / -MFE: the classifier's loss plus the gate's loss with both experts frozen.

    The two terms share no parameter (the gate term sees the personal logits detached), so
    each optimizer's step follows its own term: stepping ``personal_head`` on D_per rows and
    ``gate`` on D_gate rows is Algorithm 2's two passes.
    """

    def __init__(self, head: nn.Module, gate: nn.Linear) -> None:
        super().__init__(head)
        self.gate = gate

    def forward(self, features: torch.Tensor, global_logits: torch.Tensor,  # type: ignore[override]
                gate_input: torch.Tensor, label: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor]:
        """(classifier CE + gate CE, mixed logits g C(a) + (1 - g) C_i(a))."""
        personal = self.personal["head"](features)  # (B, C)
        g = gate_value(self.gate, gate_input)  # (B, 1)
        gate_loss = F.cross_entropy(mix_experts(g, global_logits, personal.detach()), label)
        loss = F.cross_entropy(personal, label) + gate_loss
        return loss, mix_experts(g, global_logits, personal).detach()
