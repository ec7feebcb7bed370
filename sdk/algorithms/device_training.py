"""The device-training role: what a client runs each round (the SDK client, every executor).

A method's ``Training`` class turns (global state, client state, local data, round context)
into an update for the server and a new client state (:meth:`DeviceTraining.fit`), and may
train a round's clients as one batched program (:meth:`DeviceTraining.fit_together`).
"""

from __future__ import annotations

import contextlib
from abc import ABC, abstractmethod
from collections.abc import Sequence

from pflkit.sdk.algorithms.aggregators import State
from pflkit.sdk.algorithms.contract_types import (
    ClientState,
    FitJob,
    FitResult,
    RoundContext,
)
from pflkit.sdk.algorithms.role import Role
from pflkit.sdk.batched_training import RANDOM_DRAWS, batching_blocker
from pflkit.sdk.data.tensors import LabeledTensors
from pflkit.sdk.seeding import seeded_torch


class DeviceTraining(Role, ABC):
    """A client's local training; called by the SDK client and the simulator's executors."""

    _model_blocker: tuple[str] | None = None  # the architecture's, computed once
    _model_draws: bool | None = None  # whether the architecture draws random numbers, once

    def init_client(self, client_id: int, seed: int, data: LabeledTensors) -> ClientState:
        """A client's state before its first round (default: nothing private)."""
        return ClientState()

    @abstractmethod
    def fit(self, global_state: State, client_state: ClientState, data: LabeledTensors,
            ctx: RoundContext) -> FitResult:
        """Train on the client's data for one round."""

    def batching_blocker(self) -> str | None:
        """Why this method cannot train a round's clients as one batched program (None: it can).

        A method batches by implementing :meth:`fit_together`. A subclass that changes ``fit``
        but inherits ``fit_together`` cannot batch (it would train its parent's loss), and
        neither can a model whose layers mix the rows of a batch or draw random numbers.
        """
        together = _defining_class(type(self), "fit_together")
        if together is DeviceTraining:
            return f"{self.name} has no batched trainer"
        if not issubclass(together, _defining_class(type(self), "fit")):
            return f"{self.name} changes fit but has no batched version of it"
        if self._model_blocker is None:
            self._model_blocker = (batching_blocker(self.model_factory.build()) or "",)
        reason = self._model_blocker[0]
        return f"{self.name} on {self.model_factory.name}: {reason}" if reason else None

    def seeded(self, ctx: RoundContext) -> contextlib.AbstractContextManager[object]:
        """The block a client's fit or post-federation stage runs in (the executors').

        A model whose layers draw from torch's global generator (dropout) draws there from the
        client's and round's seed, as its batch order does: drawn from the process's state, a
        resumed run, a Ray worker or another client order trained other weights. Models
        without such layers run as they are (no seeded block, whose lock threads share).
        """
        if self._model_draws is None:
            modules = self.model_factory.build().modules()
            self._model_draws = any(isinstance(m, RANDOM_DRAWS) for m in modules)
        return seeded_torch(ctx.rng_seed("layers")) if self._model_draws \
            else contextlib.nullcontext()

    def fit_batch(self, global_state: State, jobs: Sequence[FitJob]) -> list[FitResult]:
        """Train several clients of one round: together if the method can, else one by one.

        The results equal :meth:`fit` on each job up to float rounding.
        """
        if jobs and self.batching_blocker() is None:
            return self.fit_together(global_state, jobs)
        return [self.fit(global_state, j.client_state, j.data, j.ctx) for j in jobs]

    def fit_together(self, global_state: State, jobs: Sequence[FitJob]) -> list[FitResult]:
        """The batched trainer (:mod:`pflkit.sdk.batched_training`) of a method that has one."""
        raise NotImplementedError(f"{self.name} has no batched trainer")


def _defining_class(cls: type, attribute: str) -> type:
    return next(c for c in cls.__mro__ if attribute in c.__dict__)


def shared_lr(jobs: Sequence[FitJob]) -> float:
    """The learning rate of the round that ``jobs`` belong to (batched training needs one)."""
    rates = {j.ctx.lr for j in jobs}
    if len(rates) != 1:
        raise ValueError(f"jobs of one batched fit must share one learning rate, got {rates}")
    return rates.pop()
