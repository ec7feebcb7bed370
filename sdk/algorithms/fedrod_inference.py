"""FedRoD's models built from states, and the hooks that serve them.

:class:`FedRoDInference` builds the two-head net of a client from the global state and its
client state (phi: its own, or H(a_m; nu-bar), or zero) and answers every inference-side hook
of the algorithm contract: the personalized and generic models, export's
:meth:`~FedRoDInference.inference_model` with its model-card description, the evaluation
variants and the server's ``head`` query. :class:`~pflkit.sdk.algorithms.fedrod.FedRoD` adds
training on top.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import torch
from torch import nn

from pflkit.sdk.algorithms.base import Algorithm, ClientState, State
from pflkit.sdk.algorithms.fedrod_hypernet import (
    CLASS_DISTRIBUTION,
    HyperNetwork,
    head_query,
    zero_shot_head,
)
from pflkit.sdk.algorithms.fedrod_modules import PersonalizedOnly, TwoHeadNet
from pflkit.sdk.algorithms.inference import Choice, InferenceModel, Mixture
from pflkit.sdk.algorithms.state_layout import add_prefix, strip_prefix
from pflkit.sdk.models import SplitModel

PHI = "phi."  # client-state prefix of the personalized head phi_m
LOCAL = "local."  # client-state prefix of the local body and generic head after a final pass
COUNTS = "class_counts"  # client-state metadata: the client's train class counts


class FedRoDInference(Algorithm):
    """FedRoD's nets from states and its inference hooks; the variants differ in phi's origin."""

    uses_hypernetwork: ClassVar[bool] = False
    choices = (CLASS_DISTRIBUTION,)

    def server_queries(self) -> Mapping[str, Callable[[State, Any], State]]:
        """``head``: a new client's personalized head from its class distribution alone."""
        return {"head": head_query}

    # -- model plumbing -----------------------------------------------------------------------
    def _hypernetwork(self, split: SplitModel) -> HyperNetwork | None:
        """Build the hypernetwork for ``split``'s head (variant hook; linear has none)."""
        return None

    def _net(self, global_state: State, phi: State | None = None,
             local: State | None = None) -> TwoHeadNet:
        """Build a two-head net: body and generic head from ``local`` (else global), and phi."""
        split = self.model_factory.build()
        net = TwoHeadNet(split, self._hypernetwork(split)).to(self.device)
        state = {**global_state, **(local or {})}
        phi = phi if phi is not None else {k: torch.zeros_like(v)
                                           for k, v in net.phead.state_dict().items()}
        net.load_state_dict({**state, **add_prefix(phi, "phead.")})
        return net

    def _counts(self, client_state: ClientState) -> list[int] | None:
        return client_state.meta.get(COUNTS)

    def _phi(self, global_state: State, client_state: ClientState) -> State | None:
        """Return a trained client's phi (linear: its own; hyper: H(a_m; nu-bar)); None: zero."""
        phi = strip_prefix(client_state.tensors, PHI)
        if phi or not self.uses_hypernetwork:
            return phi or None
        counts = self._counts(client_state)
        if counts is None:
            raise ValueError(f"{self.name}: this client state has no class counts; "
                             f"choose {CLASS_DISTRIBUTION.name} for a zero-shot head")
        return zero_shot_head(global_state, counts)

    # -- inference ----------------------------------------------------------------------------
    def generic_and_personalized_model(self, global_state: State, client_state: ClientState,
                                       choice: Choice | None = None) -> TwoHeadNet:
        """Inference module whose forward returns ``(personalized, generic)`` logits.

        :data:`CLASS_DISTRIBUTION` chosen: the zero-shot model of a client known only by that
        distribution (client tensors ignored). Otherwise the client's own model: its local
        body and head after a final pass if it has them (else the global ones) and its phi.
        """
        dist = self._reject_choice(choice).get(CLASS_DISTRIBUTION.name)
        if dist is not None:
            net = self._net(global_state, zero_shot_head(global_state, dist))
        else:
            net = self._net(global_state, self._phi(global_state, client_state),
                            strip_prefix(client_state.tensors, LOCAL))
        if self.uses_hypernetwork:
            del net.hyper  # phi is materialized: the inference module has one input, images
        return net.eval()

    def personalized_model(self, global_state: State, client_state: ClientState,
                           choice: Choice | None = None) -> nn.Module:
        """Images in, personalized logits h_G(z) + h_P(z) out."""
        return PersonalizedOnly(
            self.generic_and_personalized_model(global_state, client_state, choice)).eval()

    def inference_model(self, global_state: State, client_state: ClientState,
                        choice: Choice | None = None) -> InferenceModel:
        """Both heads' logits (``logits`` = h_G + h_P, ``generic_logits`` = h_G), or h_G alone.

        The card's choice carries the class distribution the personal head is generated from
        (given, or a hyper client's own counts), so a new client's card names it.
        """
        choice = self.check_choice(choice)
        counts = self._counts(client_state)
        details = {"variant": "hyper" if self.uses_hypernetwork else "linear",
                   "class_counts": counts}
        if choice.head == "generic":
            return InferenceModel(self.global_model(global_state), mixture=Mixture(
                "fedrod", "the generic model h_G(f(x)): the balanced generic head alone",
                choice.to_card(), details))
        net = self.generic_and_personalized_model(global_state, client_state, choice)
        dist, own = choice.get(CLASS_DISTRIBUTION.name), strip_prefix(client_state.tensors, PHI)
        if dist is not None:
            how = "generated by the hypernetwork from the given class distribution" \
                if self.uses_hypernetwork else "zero (fedrod_linear has no zero-shot head)"
        elif own:
            how = "the client's own trained head" + (
                " after a final local pass" if strip_prefix(client_state.tensors, LOCAL) else "")
        elif self.uses_hypernetwork:  # H(a_m; nu-bar) from the client's counts (new or not)
            dist, how = counts, "generated by the hypernetwork from its class counts"
        else:
            how = "zero: the client never trained, so it is the generic model"
        given = {} if dist is None else {CLASS_DISTRIBUTION.name: list(map(float, dist))}
        return InferenceModel(net, ("logits", "generic_logits"), mixture=Mixture(
            "fedrod", f"h_G(f(x)) + h_P(f(x)), personal head {how}", given, details))

    def global_model(self, global_state: State) -> nn.Module:
        """Build the generic model h_G(f(x)) (the hypernetwork is not part of it)."""
        model = self.new_model()
        model.load_state_dict({k: v for k, v in global_state.items()
                               if k.startswith(("body.", "head."))})
        return model.eval()

    def evaluation_choices(self, client_state: ClientState) -> dict[str, Choice | None]:
        """Score the client's model; for hyper also its zero-shot model H(a_m; nu-bar)."""
        counts = self._counts(client_state)
        if not self.uses_hypernetwork or counts is None:
            return {"": None}
        return {"": None, "zero_shot": Choice({CLASS_DISTRIBUTION.name: tuple(map(float, counts))})}
