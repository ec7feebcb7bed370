"""The ExecuTorch personalization engine: every client's post-federation stage on the program.

``pfl-sim`` with ``personalize_on = "executorch"`` hands each client's stage to
:class:`OnDevicePersonalizer` instead of the algorithm's eager ``personalize``: the stage's
:class:`~pflkit.sdk.algorithms.personal.PersonalTraining` is lowered to a training program,
loaded in the ExecuTorch runtime with the client's starting weights, and walked through the
same recipe (same rows, same batch order, same lambda draws) by
:class:`~pflkit.export.device_trainer.DeviceTrainer`; the trained weights become the client's
state. This is the on-device path checked end to end on many clients.

Lowering takes seconds, so programs are shared: what a program bakes in is its frozen tensors
(the global model's, for every method here) and its input shapes, while each client's starting
weights are copied in after loading. Clients whose frozen parts are equal reuse one program.
"""

from __future__ import annotations

import hashlib

import torch

from pflkit.export.contract import EXAMPLE_BATCH, ExportError
from pflkit.export.device_trainer import DeviceTrainer
from pflkit.export.training_program import (
    OnDeviceStageError,
    TrainerExport,
    device_stage,
    program_bytes,
    training_section,
)
from pflkit.sdk.algorithms.base import Algorithm, ClientState, RoundContext, State
from pflkit.sdk.algorithms.personal import PersonalTraining, personalize_with
from pflkit.sdk.data.tensors import LabeledTensors


def frozen_key(part: PersonalTraining, section: dict) -> str:
    """A digest of everything a lowered program bakes in besides the personal weights."""
    digest = hashlib.sha256()
    trainable = set(part.initial_weights())
    modules = [("program", part.program)] + ([("prepare", part.prepare)] if part.prepare else [])
    for label, module in modules:
        for name, tensor in module.state_dict().items():
            if label == "prepare" or name not in trainable:
                digest.update(f"{label}.{name}{tuple(tensor.shape)}".encode())
                digest.update(tensor.detach().contiguous().numpy().tobytes())
    digest.update(repr([(i["name"], i["shape"]) for i in section["inputs"]]).encode())
    digest.update(str(section["max_batch"]).encode())
    return digest.hexdigest()


class OnDevicePersonalizer:
    """Run an algorithm's post-federation stage per client in the ExecuTorch runtime."""

    def __init__(self, algorithm: Algorithm, image_shape: tuple[int, ...]) -> None:
        self.algorithm = algorithm
        self.image_shape = tuple(image_shape)
        self._programs: dict[str, bytes] = {}

    def part(self, global_state: State, client_state: ClientState, data: LabeledTensors,
             ctx: RoundContext) -> PersonalTraining:
        """The client's stage, or a one-line :class:`OnDeviceStageError` saying why not."""
        return device_stage(self.algorithm, global_state, client_state, data, ctx)

    def __call__(self, global_state: State, client_state: ClientState, data: LabeledTensors,
                 ctx: RoundContext) -> ClientState:
        """The client's new state after its stage ran on the training program."""
        if len(data) == 0:  # nothing to train on: the stage's own rule for empty clients
            return self.algorithm.personalization.personalize(global_state, client_state, data, ctx)
        data = LabeledTensors(data.x.cpu(), data.y.cpu())  # the runtime is a CPU one
        part = self.part(global_state, client_state, data, ctx)
        part.program.cpu()
        if part.prepare is not None:
            part.prepare.cpu()
        section = training_section(part, self.image_shape, data.x[:1])
        key = frozen_key(part, section)
        if key not in self._programs:
            sample = data.subset(torch.arange(min(len(data), EXAMPLE_BATCH)))
            try:
                self._programs[key] = program_bytes(
                    TrainerExport(part, section, self.image_shape), sample.x, sample.y, "{}")
            except ExportError as err:
                raise OnDeviceStageError(f"{self.algorithm.name}: {err}") from err
        trainer = DeviceTrainer(self._programs[key], section, self.image_shape)
        trainer.load_weights(part.initial_weights())
        return personalize_with(part, trainer, data)
