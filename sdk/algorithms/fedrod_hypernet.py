"""FedRoD's hypernetwork (eq. 11): a personalized head from a class distribution alone.

``fedrod_hyper`` trains H(a_m; nu), two FC layers with ReLU, that maps a client's class
proportions a_m to every parameter of its personalized head phi_m. So a client that never
trained gets a head from its class distribution (:func:`zero_shot_head`), on the device, in
export, or from the server's ``head`` query.

Chosen where the paper is silent: the two layers have no bias (Table 6's hypernetwork sizes,
8,160 for FMNIST = 10*16 + 16*500, count weights only). The output is every parameter of the
registry head, bias included, so h_P has exactly the head's architecture (any registry model);
a head's buffers (fixed tensors of a model of one's own) are not generated: h_P keeps h_G's.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from pflkit.sdk.algorithms.base import State
from pflkit.sdk.algorithms.inference import DISTRIBUTION, Choice, ChoiceSpec, check_choice
from pflkit.sdk.algorithms.state_layout import strip_prefix
from pflkit.sdk.class_distribution import class_proportions

HYPER = "hyper."  # global-state prefix of the hypernetwork nu
CLASS_DISTRIBUTION = ChoiceSpec(
    "class_distribution", DISTRIBUTION, "the class counts or proportions of a client known "
    "only by them: its personal head is generated from them (fedrod_linear's is zero)",
    aliases=(("--class-counts", "counts"), ("--proportions", "proportions")), new_client=True)


def _canonical_order(names: Sequence[str]) -> list[str]:
    """Head parameter names in layer order ("4.weight" after "2.bias"), whatever dict order.

    States loaded from safetensors come in no fixed order; the hypernetwork's output layout
    and the head's class count must not depend on it.
    """
    return sorted(names, key=lambda n: [(0, int(p), "") if p.isdigit() else (1, 0, p)
                                        for p in n.split(".")])


class HyperNetwork(nn.Module):
    """H(a; nu): class proportions (C,) -> every parameter of a head, by name (eq. 11)."""

    def __init__(self, num_classes: int, hidden: int, head_shapes: dict[str, torch.Size]) -> None:
        super().__init__()
        self.shapes = {k: head_shapes[k] for k in _canonical_order(list(head_shapes))}
        self.fc1 = nn.Linear(num_classes, hidden, bias=False)
        self.fc2 = nn.Linear(hidden, sum(math.prod(s) for s in self.shapes.values()), bias=False)

    def forward(self, proportions: torch.Tensor) -> dict[str, torch.Tensor]:
        """Return phi as a head state dict (names and shapes of the head's parameters)."""
        flat = self.fc2(F.relu(self.fc1(proportions)))  # (total head parameters,)
        sizes = [math.prod(s) for s in self.shapes.values()]
        return {name: chunk.view(shape) for (name, shape), chunk
                in zip(self.shapes.items(), flat.split(sizes), strict=True)}


def zero_shot_head(global_state: State, class_distribution: torch.Tensor | Sequence[float],
                   parameters: Sequence[str] | None = None) -> State:
    """Generate the personalized head phi of a client known only by its class distribution.

    ``class_distribution``: counts or proportions, one entry per class. With a hypernetwork
    in ``global_state`` (``fedrod_hyper``): H(a; nu-bar). Without (``fedrod_linear``): a zero
    head, i.e. the personalized model equals the generic one. Keys are the head's parameter
    names (``weight``, ``bias``, ...): ``parameters`` names them when the head also has buffers
    (a state does not tell them apart; the hypernetwork generates parameters only, eq. 11),
    else every ``head.*`` tensor is one, as in every registry model.
    """
    head = strip_prefix(global_state, "head.")
    if not head:
        raise ValueError("not a FedRoD global state: no 'head.*' tensors")
    if parameters is not None:
        if missing := sorted(set(parameters) - set(head)):
            raise ValueError(f"the global state has no head tensors {missing}")
        head = {k: head[k] for k in parameters}
    hyper = strip_prefix(global_state, HYPER)
    num_classes = hyper["fc1.weight"].shape[1] if hyper else head_classes(head)
    a = class_proportions(class_distribution, num_classes)
    if not hyper:
        return {k: torch.zeros_like(v) for k, v in head.items()}
    net = HyperNetwork(num_classes, hyper["fc1.weight"].shape[0],
                       {k: v.shape for k, v in head.items()})
    rows, needed = tuple(hyper["fc2.weight"].shape[:1]), net.fc2.out_features
    if rows != (needed,):
        raise ValueError(f"the hypernetwork generates {rows} head entries, the head tensors "
                         f"{sorted(head)} hold {needed}: for a head with buffers, name its "
                         f"parameters")
    net.load_state_dict(hyper)
    with torch.no_grad():
        return {k: v.clone() for k, v in net(a).items()}


def head_query(global_state: State, body: Any, parameters: Sequence[str] | None = None
               ) -> State:
    """The server's ``head`` query: the choice ``{"class_distribution": [...]}`` -> the head.

    ``parameters``: the head's parameter names, as for :func:`zero_shot_head`.
    """
    if not isinstance(body, dict) or CLASS_DISTRIBUTION.name not in body:
        raise ValueError(f'the body must be {{"{CLASS_DISTRIBUTION.name}": '
                         f'[{CLASS_DISTRIBUTION.accepted}]}}')
    choice = check_choice("the head query", (CLASS_DISTRIBUTION,), Choice(body))
    phi = zero_shot_head(global_state, choice.values[CLASS_DISTRIBUTION.name], parameters)
    if not all(bool(torch.isfinite(v).all()) for v in phi.values()):  # never send a NaN head
        raise ValueError(f"the hypernetwork gives a head with NaN or infinite entries: the "
                         f"global state's {HYPER}* tensors are not finite or too large (did "
                         f"the run diverge?)")
    return phi


def head_classes(head: State) -> int:
    """How many classes a head predicts: the rows of its last weight."""
    last = [k for k in _canonical_order(list(head)) if k.endswith("weight")][-1]
    return int(head[last].shape[0])
