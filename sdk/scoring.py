"""Score each distinct model once, and run a shared body once for all the heads on top of it.

After federation many clients' inference models are the same model (FedAvg: every client's is
the global one) or share their body and differ only in a head (FedPer, FedRep, FedRoD, PFL-MoE's
frozen extractor). :class:`ScoringCache` recognizes both by content, not by algorithm: a model's
fingerprint is a hash of its module types, their plain settings and every tensor, so two
modules built separately with the same weights are one model.

A module whose forward is ``head_logits(x, body(x))`` (:class:`SplitModel`, FedRoD's and
PFL-MoE's inference modules) exposes ``body`` and ``head_logits``; its body's features on a
data set are computed once per distinct body, and each model then applies its own head. The
chunks are the ones :func:`pflkit.sdk.metrics.predict` uses and the operations are those of the
forward, so the logits are bit-identical to scoring every model on its own.
"""

from __future__ import annotations

import hashlib
import weakref
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import torch
from torch import nn

from pflkit.sdk.data.tensors import LabeledTensors
from pflkit.sdk.metrics import PREDICT_BATCH, predict


@runtime_checkable
class SharedBody(Protocol):
    """A model whose logits are ``head_logits(x, body(x))``."""

    body: nn.Module

    def head_logits(self, x: torch.Tensor, features: torch.Tensor) -> torch.Tensor:
        """Logits (B, C) from inputs x (B, ...) and their features ``body(x)``."""


def fingerprint(module: nn.Module) -> str:
    """A hash of what determines ``module``'s function: types, plain settings and tensors.

    The tensors reach the host as one byte buffer: one device-to-host copy and one wait per
    model on a GPU, not one per tensor.
    """
    return _digest(_settings(module), module)


def _digest(settings: str, module: nn.Module) -> str:
    """:func:`fingerprint` of ``module`` given its :func:`_settings` (taken once by callers)."""
    digest = hashlib.blake2b(digest_size=20)
    digest.update(settings.encode())
    tensors = module.state_dict()
    for name, tensor in tensors.items():
        digest.update(f"{name}:{tensor.dtype}:{tuple(tensor.shape)};".encode())
    # 1-D before the byte view: a 0-dim tensor of wider elements (BatchNorm's step count)
    # has no uint8 view
    raw = [t.detach().reshape(-1).contiguous().view(torch.uint8) for t in tensors.values()
           if t.numel()]
    if raw:
        digest.update(torch.cat(raw).cpu().numpy().tobytes())
    return digest.hexdigest()


def _settings(module: nn.Module) -> str:
    """Every submodule's name, type and plain settings, in order."""
    text = []
    for name, sub in module.named_modules():
        settings = sorted((k, v) for k, v in vars(sub).items()
                          if not k.startswith("_") and k != "training"
                          and isinstance(v, bool | int | float | str | tuple | type(None)))
        text.append(f"{name}:{type(sub).__qualname__}:{settings!r};")
    return "".join(text)


@dataclass(frozen=True)
class _Seen:
    """A module's fingerprint and what it was taken of (:meth:`ScoringCache.fingerprint`)."""

    settings: str
    tensors: tuple[tuple[object, ...], ...]  # per tensor: name, id, version, memory, layout
    held: tuple[object, ...]  # the tensors and storages: their ids and addresses stay unique
    digest: str


def _identity(module: nn.Module) -> tuple[tuple[tuple[object, ...], ...], tuple[object, ...]]:
    """Which tensor objects ``module`` holds, each with its version and memory; and them.

    A tensor changed in place has another version, a replaced one another id or storage.
    """
    rows, held = [], []
    for name, t in module.state_dict(keep_vars=True).items():
        storage = t.untyped_storage()
        rows.append((name, id(t), t._version, storage.data_ptr(), t.storage_offset(),
                     tuple(t.shape), t.stride(), t.dtype))
        held += [t, storage]
    return tuple(rows), tuple(held)


class ScoringCache:
    """Logits of models on data sets, each distinct (model, data) and (body, data) run once.

    Keep one cache for one evaluation pass (the models and data sets it has seen stay alive
    until it is dropped). ``models_run`` and ``bodies_run`` count the forward passes made,
    ``models_hashed`` the modules fingerprinted.
    """

    def __init__(self) -> None:
        self._logits: dict[tuple[str, int], torch.Tensor] = {}
        self._features: dict[tuple[str, int], list[torch.Tensor]] = {}
        self._data: dict[int, LabeledTensors] = {}  # keeps ids unique while cached
        self._seen: weakref.WeakKeyDictionary[nn.Module, _Seen] = weakref.WeakKeyDictionary()
        self.models_run = 0
        self.bodies_run = 0
        self.models_hashed = 0

    def predict(self, model: nn.Module, data: LabeledTensors) -> torch.Tensor:
        """Logits (N, C) of ``model`` in eval mode on ``data``, as :func:`predict` gives them."""
        self._data[id(data)] = data
        key = (self.fingerprint(model), id(data))
        if key not in self._logits:
            self._logits[key] = self._run(model, data)
        return self._logits[key]

    def fingerprint(self, module: nn.Module) -> str:
        """:func:`fingerprint`, taken once per module object while it keeps its tensors.

        A client's model is scored on its own test rows and on the global test set, and a
        shared body once per data set: each call copied every weight to the host (from a GPU).
        The module's settings are compared as text, its tensors by identity, version and memory
        (a write through ``.data`` is the one torch does not count: the simulator never makes
        one to a model it scores).
        """
        settings, (tensors, held) = _settings(module), _identity(module)
        seen = self._seen.get(module)
        if seen is None or (seen.settings, seen.tensors) != (settings, tensors):
            seen = _Seen(settings, tensors, held, _digest(settings, module))
            self._seen[module] = seen
            self.models_hashed += 1
        return seen.digest

    @torch.no_grad()
    def _run(self, model: nn.Module, data: LabeledTensors) -> torch.Tensor:
        self.models_run += 1
        if not isinstance(model, SharedBody) or not len(data):
            return predict(model, data)
        was_training = model.training
        model.eval()
        try:
            features = self._body_features(model.body, data)
            chunks = [model.head_logits(data.x[i : i + PREDICT_BATCH], z)
                      for i, z in zip(range(0, len(data), PREDICT_BATCH), features, strict=True)]
        finally:
            model.train(was_training)
        return torch.cat(chunks)

    def _body_features(self, body: nn.Module, data: LabeledTensors) -> list[torch.Tensor]:
        """Features of ``body`` on ``data`` in :func:`predict`'s chunks (once per body)."""
        key = (self.fingerprint(body), id(data))
        if key not in self._features:
            self.bodies_run += 1
            self._features[key] = [body(data.x[i : i + PREDICT_BATCH])
                                   for i in range(0, len(data), PREDICT_BATCH)]
        return self._features[key]
