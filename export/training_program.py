"""A method's personal part as an ExecuTorch training program (``pfl-export --trainer``).

The algorithm describes its post-federation stage (``Personalization.personal_training``, a
:class:`~pflkit.sdk.algorithms.personal.PersonalTraining`); this module knows no algorithm and
turns any such description into files a device runs:

* ``personal_train.pte`` with the method ``train``: the joint forward + backward graph of the
  trainable program (``torch.export`` -> ``_export_forward_backward`` -> ``to_edge``), portable
  kernels (:mod:`.portable_kernels` says which ops are rewritten around a wrong or slow
  kernel), inputs with a dynamic batch; its user outputs are ``(loss, logits)``, then the
  runtime's gradients and parameters. ``prepare`` (inference, XNNPACK) computes the frozen
  tensors the program reads, once per row; ``model_card`` is the card as a uint8 constant.
* ``personal_init.safetensors``: the weights the stage starts from, named as the client state.
* the card's ``training`` section (docs/model-card.md): inputs, parameters, loss, optimizers,
  schedule, row splits, the lambda input and rule (SuPerFed).

Verification is part of the export: :data:`VERIFY_STEPS` steps of the recipe on the client's rows
in the ExecuTorch runtime (:class:`~pflkit.export.device_trainer.DeviceTrainer`) and in eager
PyTorch (same batches, same lambda draws) must end with personal weights within
:data:`RELATIVE_TOLERANCE` of each other.
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from pflkit.export.contract import EXAMPLE_BATCH, ExportError
from pflkit.export.device_trainer import PREPARE_METHOD, TRAIN_METHOD, DeviceTrainer
from pflkit.export.formats import CARD_METHOD, PTE_MAX_BATCH
from pflkit.export.portable_kernels import convolutions_as_matmul, joint_decompositions
from pflkit.export.source import Source
from pflkit.export.training_section import SCHEMA
from pflkit.sdk.algorithms.base import Algorithm, ClientState, RoundContext, make_algorithm
from pflkit.sdk.algorithms.personal import EagerSession, PersonalTraining, run_recipe
from pflkit.sdk.data.tensors import LabeledTensors
from pflkit.sdk.tensorio import State, atomic_write_bytes, save_state

PROGRAM_FILE = "personal_train.pte"
WEIGHTS_FILE = "personal_init.safetensors"
PROGRAM_FORMAT = "executorch-training"
VERIFY_STEPS = 20
RELATIVE_TOLERANCE = 1e-4


class OnDeviceStageError(ValueError):
    """The algorithm (with its hyperparameters) has no stage a device can run."""


def device_stage(algorithm: Algorithm, global_state: State, client_state: ClientState,
                 data: LabeledTensors, ctx: RoundContext) -> PersonalTraining:
    """The algorithm's post-federation stage for one client, if a device can run it."""
    part = algorithm.personalization.personal_training(global_state, client_state, data, ctx)
    if part is None:
        raise OnDeviceStageError(f"{algorithm.name}: these hyperparameters give no "
                                 f"post-federation stage a device can run (docs/on-device.md "
                                 f"lists the ones that do)")
    not_sgd = [o.name for o in part.recipe.optimizers if o.kind != "sgd"]
    if not_sgd:
        raise OnDeviceStageError(f"{algorithm.name}: optimizer {', '.join(not_sgd)} is not SGD; "
                                 f"ExecuTorch's training runtime offers SGD only")
    return part


@dataclass
class TrainerExport:
    """The stage to export and its card section (known before any file is written)."""

    part: PersonalTraining
    section: dict[str, Any]
    image_shape: tuple[int, ...]


def trainer_export(source: Source, params: dict[str, Any] | None = None) -> TrainerExport:
    """Ask the source's algorithm for its personal stage (``params`` override its settings)."""
    algorithm = source.algorithm
    if params:
        base = {} if algorithm.params is None else dataclasses.asdict(algorithm.params)
        try:
            algorithm = make_algorithm(algorithm.name, algorithm.model_factory, algorithm.local,
                                       {**base, **params})
        except ValueError as err:
            raise ExportError(f"--trainer-param: {err}") from err
    if source.stage is None:
        raise ExportError("this source has no post-federation context to build a trainer for")
    if len(source.train) == 0:
        raise ExportError("no training rows to trace and verify the training program with")
    try:
        part = device_stage(algorithm, source.global_state, source.client_state, source.train,
                            source.stage)
    except OnDeviceStageError as err:
        raise ExportError(f"{err} (--trainer-param KEY=VALUE overrides the run's settings)"
                          ) from err
    except ValueError as err:
        raise ExportError(f"cannot build the training program: {err}") from err
    shape = tuple(source.spec.input_shape)
    return TrainerExport(part, training_section(part, shape, source.train.x[:1]), shape)


def _spec(name: str, shape: tuple[int, ...], dtype: str = "float32", batched: bool = True,
          **extra: Any) -> dict[str, Any]:
    return {"name": name, "shape": (["batch"] if batched else []) + list(shape), "dtype": dtype,
            **extra}


def training_section(part: PersonalTraining, image_shape: tuple[int, ...], row: torch.Tensor
                     ) -> dict[str, Any]:
    """The card's ``training`` section (docs/model-card.md)."""
    prepared = EagerSession(part).prepare(row)
    source = "prepare" if part.prepare is not None else "image"
    inputs = [_spec(n, tuple(t.shape[1:]), **{"from": source})
              for n, t in zip(part.prepared_names, prepared, strict=True)]
    inputs.append(_spec("label", (), "int64", **{"from": "label"}))
    lam = part.recipe.lam
    if lam is not None:
        inputs.append(_spec("lam", (lam.size,), batched=False, **{"from": "lambda"}))
    with torch.no_grad():
        logits = part.program(*(t for t in prepared), torch.zeros(1, dtype=torch.long),
                              *(() if lam is None else (lam.constant(0),)))[1]
    return {
        "schema_version": SCHEMA,
        "program": PROGRAM_FILE,
        "initial_weights": WEIGHTS_FILE,
        "train_method": TRAIN_METHOD,
        "prepare_method": PREPARE_METHOD if part.prepare is not None else None,
        "image_shape": list(image_shape),
        "inputs": inputs,
        "outputs": [_spec("loss", (), batched=False), _spec("logits", tuple(logits.shape[1:]))],
        "parameters": [_spec(n, tuple(w.shape), batched=False)
                       for n, w in part.initial_weights().items()],
        "max_batch": max(PTE_MAX_BATCH, part.recipe.batch_size),
        **part.recipe.to_card(),
    }


def _example(part: PersonalTraining, images: torch.Tensor, labels: torch.Tensor
             ) -> tuple[torch.Tensor, ...]:
    prepared = EagerSession(part).prepare(images)
    lam = () if part.recipe.lam is None else (part.recipe.lam.constant(0.5),)
    return (*prepared, labels, *lam)


def _example_rows(images: torch.Tensor, labels: torch.Tensor
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    """:data:`EXAMPLE_BATCH` rows to trace with (repeated when fewer are given)."""
    reps = -(-EXAMPLE_BATCH // len(images))
    return (images.repeat(reps, *([1] * (images.dim() - 1)))[:EXAMPLE_BATCH],
            labels.repeat(reps)[:EXAMPLE_BATCH])


def train_graph(trainer: TrainerExport, images: torch.Tensor, labels: torch.Tensor
                ) -> torch.export.ExportedProgram:
    """The ``train`` method before lowering: the joint forward + backward graph.

    Rewritten for the portable kernels (:mod:`.portable_kernels`); the batch is dynamic.
    """
    from torch.export.experimental import _export_forward_backward

    part, section = trainer.part, trainer.section
    images, labels = _example_rows(images, labels)
    batch = torch.export.Dim("batch", min=1, max=section["max_batch"])
    dynamic = tuple({0: batch} if spec["shape"][:1] == ["batch"] else None
                    for spec in section["inputs"])
    program = convolutions_as_matmul(copy.deepcopy(part.program).train())
    joint = _export_forward_backward(torch.export.export(
        program, _example(part, images, labels), dynamic_shapes=dynamic))
    return joint.run_decompositions(joint_decompositions())


def program_bytes(trainer: TrainerExport, images: torch.Tensor, labels: torch.Tensor,
                  card_json: str) -> bytes:
    """Lower the stage to one ``.pte``: ``train`` (joint graph), ``prepare``, ``model_card``."""
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import EdgeCompileConfig, to_edge_transform_and_lower

    part = trainer.part
    images, labels = _example_rows(images, labels)
    try:
        methods = {TRAIN_METHOD: train_graph(trainer, images, labels)}
        partitioners: dict[str, list[Any]] = {TRAIN_METHOD: []}
        if part.prepare is not None:
            prepare_batch = torch.export.Dim("batch", min=1, max=PTE_MAX_BATCH)
            methods[PREPARE_METHOD] = torch.export.export(
                copy.deepcopy(part.prepare).eval(), (images,),
                dynamic_shapes=({0: prepare_batch},))
            partitioners[PREPARE_METHOD] = [XnnpackPartitioner()]
        card = torch.tensor(list(card_json.encode()), dtype=torch.uint8)
        lowered = to_edge_transform_and_lower(
            methods, partitioner=partitioners, constant_methods={CARD_METHOD: card},
            compile_config=EdgeCompileConfig(_check_ir_validity=False))
        return lowered.to_executorch().buffer
    except Exception as err:  # torch.export / lowering errors have no common base class
        raise ExportError(f"cannot lower the training program: {type(err).__name__}: "
                          f"{str(err).splitlines()[0] if str(err) else ''}") from err


def _first_non_finite(weights: State) -> str | None:
    """The name of the first tensor holding NaN or Inf, or None."""
    return next((n for n, w in weights.items() if not torch.isfinite(w).all()), None)


def relative_difference(got: State, want: State) -> float:
    """The largest per-tensor max|got - want| / max|want| (absolute for an all-zero ``want``).

    Infinite when either side holds NaN or Inf: no such weights are within any tolerance.
    """
    if _first_non_finite(got) is not None or _first_non_finite(want) is not None:
        return float("inf")
    worst = 0.0
    for name, w in want.items():
        diff, scale = float((got[name] - w).abs().max()), float(w.abs().max())
        worst = max(worst, diff / scale if scale > 0 else diff)
    return worst


def verify_trainer(trainer: TrainerExport, path: Path, source: Source) -> dict[str, Any]:
    """Train :data:`VERIFY_STEPS` steps in the runtime and eagerly; the card's parity entry."""
    part = trainer.part
    device = DeviceTrainer(path, trainer.section, trainer.image_shape)
    eager = EagerSession(part)
    endless = dataclasses.replace(part.recipe, epochs=VERIFY_STEPS)  # >= VERIFY_STEPS steps
    runs = [run_recipe(endless, s, source.train, part.rows, part.generator,
                       max_steps=VERIFY_STEPS) for s in (eager, device)]
    for engine, session in (("eager PyTorch", eager), ("the ExecuTorch runtime", device)):
        bad = _first_non_finite(session.weights())
        if bad is not None:
            raise ExportError(f"{PROGRAM_FILE}: after {runs[0].steps} steps in {engine} the "
                              f"personal weight {bad} is not finite: the recipe diverges on "
                              f"these rows (a lower learning rate: --trainer-param)")
    diff = relative_difference(device.weights(), eager.weights())
    entry = {"file": PROGRAM_FILE, "kind": "training", "precision": "fp32",
             "steps": runs[0].steps, "rows": len(source.train), "max_rel_weight_diff": diff,
             "tolerance": RELATIVE_TOLERANCE, "last_loss_eager": runs[0].losses,
             "last_loss_program": runs[1].losses}
    if diff > RELATIVE_TOLERANCE:
        raise ExportError(f"{PROGRAM_FILE}: after {runs[0].steps} steps the personal weights "
                          f"differ from eager PyTorch by {diff:.2e} (relative) > "
                          f"{RELATIVE_TOLERANCE:g}")
    return entry


def write_trainer(trainer: TrainerExport, folder: Path, source: Source, card_json: str
                  ) -> tuple[list[Path], dict[str, Any]]:
    """Write the program and its initial weights into ``folder``, verify; (files, parity)."""
    sample = source.train.subset(torch.arange(min(len(source.train), EXAMPLE_BATCH)))
    program = folder / PROGRAM_FILE
    atomic_write_bytes(program, program_bytes(trainer, sample.x, sample.y, card_json))
    save_state(folder / WEIGHTS_FILE, trainer.part.initial_weights())
    return [program, folder / WEIGHTS_FILE], verify_trainer(trainer, program, source)
