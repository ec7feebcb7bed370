"""FedRoD's training objective (eq. 6 and 14) as pure functions.

The generic head learns with the balanced softmax (BSM, Ren et al. 2020): cross-entropy of the
logits shifted by the client's log class prior, so that each client's loss estimates the
class-balanced risk. Chosen where the paper is silent: a class with zero count gets the finite
log-prior :data:`ZERO_COUNT_LOG_PRIOR` instead of log 0 = -inf, numerically the N_c -> 0 limit
of BSM (that class gets no softmax mass and no gradient) while the loss stays finite even for a
label of such a class.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call

from pflkit.sdk.class_distribution import ClassDistributionError
from pflkit.sdk.training import Batch

ZERO_COUNT_LOG_PRIOR = -1e4  # log N_c for a class the client never saw (finite, see above)

Forward = Callable[[torch.Tensor], torch.Tensor]


def log_prior(class_counts: torch.Tensor, gamma: float = 1.0) -> torch.Tensor:
    """Return gamma * log N_c per class; zero counts get ``ZERO_COUNT_LOG_PRIOR``.

    Eq. 6 only shifts every logit of a row by gamma * log of its class's share, so counts and
    proportions (any positive scale of N_c) give the same loss: a share below 1 keeps its own
    log, it is not rounded up to a count of 1. Negative or non-finite counts are refused.
    """
    counts = torch.as_tensor(class_counts).double()
    if not bool(torch.isfinite(counts).all()) or bool((counts < 0).any()):
        raise ClassDistributionError(f"class counts must be finite and >= 0, got "
                                     f"{counts.flatten()[:6].tolist()}")
    logs = torch.where(counts > 0, counts.log(), torch.full_like(counts, ZERO_COUNT_LOG_PRIOR))
    return (gamma * logs).float()


def balanced_softmax_loss(logits: torch.Tensor, y: torch.Tensor, class_counts: torch.Tensor,
                          gamma: float = 1.0) -> torch.Tensor:
    """Balanced softmax (Ren et al. 2020; FedRoD eq. 6): CE of logits + gamma * log N_c."""
    return F.cross_entropy(logits + log_prior(class_counts, gamma).to(logits.device), y)


def fedrod_loss(body: Forward, head: Forward, phead: nn.Module, batch: Batch,
                prior: torch.Tensor, phi: Mapping[str, torch.Tensor]
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """(L_BR, L_m) of one mini-batch with one body forward (eq. 14).

    ``body`` and ``head`` run the shared weights; ``prior`` is the client's log prior
    (:func:`log_prior`); ``phi`` the personalized head's parameters (the trainable ``phead``
    ones, or a hypernetwork's output), run through the ``phead`` module.
    """
    z = body(batch.x)
    generic = head(z)  # (B, C)
    l_br = batch.cross_entropy(generic + prior)
    # No gradient from the personalized loss into theta or psi (App. B.2).
    personal = generic.detach() + functional_call(phead, dict(phi), (z.detach(),))
    return l_br, batch.cross_entropy(personal)
