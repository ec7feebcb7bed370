"""FedRoD's device training: eq. 14 on one batch, one client or a round's clients at once.

The loss is :func:`~pflkit.sdk.algorithms.fedrod_objective.fedrod_loss`; the nets come from
the method (:meth:`FedRoD.net <pflkit.sdk.algorithms.fedrod.FedRoD.net>`). Linear keeps phi_m
in the client state; hyper regenerates it from nu every round, so nothing private persists.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import torch
from torch import nn
from torch.func import functional_call

from pflkit.sdk.algorithms.base import ClientState, FitJob, FitResult, RoundContext, State
from pflkit.sdk.algorithms.device_training import DeviceTraining, shared_lr
from pflkit.sdk.algorithms.fedrod_hypernet import HYPER
from pflkit.sdk.algorithms.fedrod_inference import COUNTS, LOCAL, PHI
from pflkit.sdk.algorithms.fedrod_modules import TwoHeadNet
from pflkit.sdk.algorithms.fedrod_objective import fedrod_loss, log_prior
from pflkit.sdk.algorithms.state_layout import strip_prefix
from pflkit.sdk.batched_training import BatchGrid, stack, train_together
from pflkit.sdk.class_distribution import class_proportions
from pflkit.sdk.data.tensors import LabeledTensors
from pflkit.sdk.training import Batch, run_epochs, sgd

if TYPE_CHECKING:
    from pflkit.sdk.algorithms.fedrod import FedRoD


class FedRoDTraining(DeviceTraining):
    """Body, generic head and phi (linear) or nu (hyper) trained on eq. 14 each round."""

    method: FedRoD

    def _trainable(self, net: TwoHeadNet) -> dict[str, nn.Parameter]:
        """What local training updates: body, generic head, and phi (linear) or nu (hyper)."""
        own = HYPER if self.method.uses_hypernetwork else "phead."
        return {n: p for n, p in net.named_parameters() if n.startswith(("body.", "head.", own))}

    def _local_loss(self, net: TwoHeadNet, params: Mapping[str, torch.Tensor], batch: Batch,
                    prior: torch.Tensor, proportions: torch.Tensor | None) -> torch.Tensor:
        """Eq. 14 on one batch, ``net`` run with the trainable weights ``params``."""
        def body(x: torch.Tensor) -> torch.Tensor:
            return functional_call(net.body, strip_prefix(params, "body."), (x,))

        def head(z: torch.Tensor) -> torch.Tensor:
            return functional_call(net.head, strip_prefix(params, "head."), (z,))

        phi = (functional_call(net.hyper, strip_prefix(params, HYPER), (proportions,))
               if self.method.uses_hypernetwork else strip_prefix(params, "phead."))
        l_br, l_m = fedrod_loss(body, head, net.phead, batch, prior, phi)
        return l_br + l_m

    def _start(self, global_state: State, client_state: ClientState, data: LabeledTensors
               ) -> tuple[TwoHeadNet, torch.Tensor, torch.Tensor | None]:
        """(net at the round's start, the client's log prior, its class proportions for hyper)."""
        c, hyper = self.model_factory.num_classes, self.method.uses_hypernetwork
        counts = data.class_counts(c)
        phi0 = None if hyper else strip_prefix(client_state.tensors, PHI) or None
        net = self.method.net(global_state, phi0).train()
        a = class_proportions(counts, c) if hyper else None
        return net, log_prior(counts, self.params.gamma), a

    def _finish(self, net: TwoHeadNet, proportions: torch.Tensor | None) -> None:
        """hyper: materialize phi_m = H(a_m; nu) into the personalized head (its buffers kept)."""
        if self.method.uses_hypernetwork:
            with torch.no_grad():
                net.phead.load_state_dict({**net.phead.state_dict(), **net.hyper(proportions)})

    def train(self, global_state: State, client_state: ClientState, data: LabeledTensors,
              epochs: int, lr: float, generator: torch.Generator
              ) -> tuple[TwoHeadNet, torch.Tensor]:
        """Eq. 14 for ``epochs`` epochs from the global state (and the client's phi)."""
        net, prior, a = self._start(global_state, client_state, data)
        params = self._trainable(net)
        optimizer = sgd(params.values(), lr, self.local.momentum, self.local.weight_decay)
        mean_loss = run_epochs(
            optimizer, lambda x, y: self._local_loss(net, params, Batch(x, y), prior, a), data,
            epochs, self.local.batch_size, generator)
        self._finish(net, a)
        return net, mean_loss

    def client_state_of(self, net: TwoHeadNet, data: LabeledTensors, meta: dict,
                        keep: tuple[str, ...]) -> ClientState:
        """Keep phi (``"phead."`` in ``keep``) and/or the local body and head, and the counts."""
        tensors: State = {}
        for key, value in net.state_dict().items():
            if key.startswith(keep):
                name = f"{PHI}{key.removeprefix('phead.')}" if key.startswith("phead.") \
                    else f"{LOCAL}{key}"
                tensors[name] = value.detach().clone()
        counts = data.class_counts(self.model_factory.num_classes).tolist()
        return ClientState(tensors, {**meta, COUNTS: counts})

    def fit(self, global_state: State, client_state: ClientState, data: LabeledTensors,
            ctx: RoundContext) -> FitResult:
        """One round of eq. 14; send body, generic head (and hypernetwork), keep phi (linear)."""
        net, loss = self.train(global_state, client_state, data, self.local.epochs, ctx.lr,
                               ctx.generator("batches"))
        return self._fit_result(net, data, client_state, loss)

    def _fit_result(self, net: TwoHeadNet, data: LabeledTensors, client_state: ClientState,
                    loss: float | torch.Tensor) -> FitResult:
        update = {k: v.detach().clone() for k, v in net.state_dict().items()
                  if not k.startswith("phead.")}
        # hyper: phi is regenerated from nu-bar every round, so nothing private persists.
        keep = () if self.method.uses_hypernetwork else ("phead.",)
        new_state = self.client_state_of(net, data, client_state.meta, keep)
        return FitResult(update, new_state, len(data), {"train_loss": loss})

    def fit_together(self, global_state: State, jobs: Sequence[FitJob]) -> list[FitResult]:
        """:meth:`fit` for several clients of one round at once, one vmapped program."""
        starts = [self._start(global_state, j.client_state, j.data) for j in jobs]
        nets = [net for net, _, _ in starts]
        inputs = {"prior": torch.stack([prior for _, prior, _ in starts])}  # (K, C)
        if self.method.uses_hypernetwork:  # every client has proportions then
            inputs["a"] = torch.stack([a for _, _, a in starts if a is not None])  # (K, C)
        grid = BatchGrid.build([j.data for j in jobs], self.local.epochs, self.local.batch_size,
                               [j.ctx.generator("batches") for j in jobs])
        template = nets[0]

        def loss(p: dict[str, torch.Tensor], batch: Batch, inp: dict[str, torch.Tensor]
                 ) -> torch.Tensor:
            return self._local_loss(template, p, batch, inp["prior"], inp.get("a"))

        start = stack([{n: p.detach().clone() for n, p in self._trainable(net).items()}
                       for net in nets])
        trained, losses = train_together(loss, start, grid, shared_lr(jobs), self.local.momentum,
                                         self.local.weight_decay, client_inputs=inputs)
        results, mean_losses = [], losses.tolist()  # one host sync, not one per client
        for k, ((net, _, a), job) in enumerate(zip(starts, jobs, strict=True)):
            with torch.no_grad():
                for name, param in self._trainable(net).items():
                    param.copy_(trained[name][k])
            self._finish(net, a)
            results.append(self._fit_result(net, job.data, job.client_state, mean_losses[k]))
        return results

    def init_client(self, client_id: int, seed: int, data: LabeledTensors) -> ClientState:
        """No tensors yet (phi: h_P = 0 at first, or from the hypernetwork); the class counts."""
        return ClientState({}, {COUNTS: data.class_counts(self.model_factory.num_classes).tolist()})
