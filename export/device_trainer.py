"""Run a personal-part training program in the ExecuTorch runtime (the one a phone runs).

:class:`DeviceTrainer` loads a ``personal_train.pte`` written by
:mod:`pflkit.export.training_program` with ``executorch.extension.training`` and implements the
:class:`~pflkit.sdk.algorithms.personal.Session` interface, so the same recipe walk that trains
the eager stage trains the program: ``prepare`` (frozen, XNNPACK) once per row, then the joint
forward/backward method ``train`` and one ExecuTorch SGD optimizer per parameter group, exactly
what ``org.pytorch.executorch.training.TrainingModule`` and ``SGD`` do in the app.

Two quirks of the runtime (executorch 1.5.1) shape the code: ``named_parameters()`` exists only
after a first ``forward_backward``, so loading runs one on zero inputs (it computes gradients
but changes no weight); and the parameters it returns alias the program's memory, so loading
weights is an in-place copy and every optimizer step is visible to the next call.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import torch

from pflkit.export.quiet import set_runtime_threads
from pflkit.export.training_card import (
    TrainingProgramError,
    check_batch,
    check_rows,
    check_weights,
    read_card,
)
from pflkit.sdk.algorithms.personal import PREDICT_CHUNK, RecipeResult, run_recipe
from pflkit.sdk.algorithms.recipe import Recipe
from pflkit.sdk.data.tensors import LabeledTensors
from pflkit.sdk.tensorio import State, save_state, state_from_bytes

TRAIN_METHOD = "train"  # the method names the writer gives a program (the card names them)
PREPARE_METHOD = "prepare"
__all__ = ["DeviceTrainer", "TrainingProgramError"]


class DeviceTrainer:
    """A loaded training program: prepare, step, predict, read and write its personal weights."""

    def __init__(self, program: bytes | Path, section: dict[str, Any],
                 image_shape: tuple[int, ...], threads: int = 1) -> None:
        """Load ``program`` as ``section`` (a checked card's ``training``) describes it."""
        from executorch.extension.training import (
            _load_for_executorch_for_training_from_buffer,
            get_sgd_optimizer,
        )

        set_runtime_threads(threads)  # XNNPACK threads (prepare)
        # The runtime reads the program from this buffer for its whole life: keep it referenced.
        self._buffer = program if isinstance(program, bytes) else Path(program).read_bytes()
        self.section = section
        try:
            self.recipe = Recipe.from_card(section)
        except (KeyError, TypeError, ValueError) as err:
            raise TrainingProgramError(f"the card's training section is incomplete or malformed "
                                       f"({type(err).__name__}: {err})") from err
        self.image_shape = tuple(image_shape)
        self.train_method = section["train_method"]
        self.prepare_method = section.get("prepare_method")
        try:  # a damaged or foreign program fails here, in the runtime's own words
            with warnings.catch_warnings():  # the training API is marked experimental: known
                warnings.filterwarnings("ignore", message="This API is experimental")
                self.module = _load_for_executorch_for_training_from_buffer(self._buffer)
            warmup = self.prepare(torch.zeros(1, *self.image_shape))
            self.module.forward_backward(self.train_method, self._train_inputs(
                warmup, torch.zeros(1, dtype=torch.long)))
        except RuntimeError as err:
            raise TrainingProgramError(f"not a training program the ExecuTorch runtime can run "
                                       f"with this card ({str(err).splitlines()[0]})") from err
        self.parameters = self.module.named_parameters()
        declared = [p["name"] for p in section["parameters"]]
        if sorted(self.parameters) != sorted(declared):
            raise TrainingProgramError(f"program parameters {sorted(self.parameters)} differ "
                                       f"from the card's {sorted(declared)}")
        self._sgd = get_sgd_optimizer
        self.new_optimizers()

    def new_optimizers(self) -> None:
        """One fresh ExecuTorch SGD per recipe optimizer: no momentum from an earlier stage."""
        self.optimizers = {spec.name: self._sgd(
            {n: self.parameters[n] for n in spec.parameters}, spec.lr, spec.momentum,
            spec.dampening, spec.weight_decay, spec.nesterov) for spec in self.recipe.optimizers}

    @classmethod
    def from_export(cls, export_dir: str | Path, threads: int = 1) -> DeviceTrainer:
        """Load ``<export_dir>/personal_train.pte`` as its model card describes it.

        The card and both files are checked first (:func:`~.training_card.read_card`): a
        program or weights of another export, or damaged ones, are one-line errors; the checked
        bytes are what loads.
        """
        folder = Path(export_dir)
        section, files = read_card(folder)
        trainer = cls(files["program"], section, tuple(section["image_shape"]), threads)
        trainer.load_weights(state_from_bytes(files["initial_weights"],
                                              str(folder / section["initial_weights"])))
        return trainer

    # -- the Session interface ------------------------------------------------------------------
    def prepare(self, images: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """The ``prepare`` method over all rows in chunks (the images themselves without one)."""
        if self.prepare_method is None:
            return (images,)
        parts = [self.module.model.run_method(self.prepare_method, (chunk.contiguous(),))
                 for chunk in images.split(PREDICT_CHUNK)]
        return tuple(torch.cat([p[k].clone() for p in parts]) for k in range(len(parts[0])))

    def step(self, optimizer: str, inputs: tuple[torch.Tensor, ...]) -> torch.Tensor:
        """One ``forward_backward`` of ``train`` and one SGD step of ``optimizer``; the loss."""
        if optimizer not in self.optimizers:
            raise TrainingProgramError(f"no optimizer named {optimizer!r} (the card's: "
                                       f"{', '.join(self.optimizers)})")
        loss = self._forward_backward(inputs)[0]
        self.optimizers[optimizer].step(self.module.named_gradients())
        return loss.clone()  # the program's output memory is its own: the next call reuses it

    def logits(self, inputs: tuple[torch.Tensor, ...]) -> torch.Tensor:
        """The ``logits`` output (the gradients computed on the way are dropped)."""
        return self._forward_backward(inputs)[1]

    def _forward_backward(self, inputs: tuple[torch.Tensor, ...]) -> list[torch.Tensor]:
        """The train method on one batch; a batch it cannot take is one line, not a C++ code."""
        rows, most = len(inputs[0]), self.section["max_batch"]
        if not 1 <= rows <= most:
            raise TrainingProgramError(f"a batch of {rows} rows: the program takes 1..{most} "
                                       "(training.max_batch)")
        check_batch(self.section, inputs)
        try:
            return self.module.forward_backward(self.train_method, _contiguous(inputs))
        except RuntimeError as err:
            raise TrainingProgramError(f"the program cannot run these inputs ("
                                       f"{str(err).splitlines()[0]}): training.inputs lists "
                                       "the shapes and dtypes it takes") from err

    def weights(self) -> State:
        """Copies of the personal weights."""
        return {n: p.clone() for n, p in self.parameters.items()}

    # -- weights at rest ------------------------------------------------------------------------
    def load_weights(self, state: State) -> None:
        """Copy named personal weights into the program (names and shapes must match).

        Every tensor is checked before the first is copied: refused weights change nothing.
        """
        check_weights(state, self.parameters)
        for name, param in self.parameters.items():
            param.copy_(state[name])

    def save_weights(self, path: str | Path) -> None:
        """Write the personal weights as safetensors (the names the client state uses)."""
        save_state(Path(path), self.weights())

    # -- a device's whole stage -----------------------------------------------------------------
    def personalize(self, images: torch.Tensor, labels: torch.Tensor, seed: int = 0
                    ) -> RecipeResult:
        """Run the card's stage on labelled rows: split them, train, choose lambda if asked.

        What an app does with the user's samples; rows are split by the card's ``splits``
        with a generator seeded by ``seed``, and the optimizers start fresh (no momentum from
        an earlier call). Rows of another shape, non-finite images and labels outside the
        program's classes are refused before any weight changes; float64 or float16 images are
        trained on as float32, the program's input type. A stage that diverges puts the
        weights back and raises.
        """
        check_rows(self.section, self.image_shape, images, labels)
        data = LabeledTensors(images.float(), labels.long())  # the program's dtypes
        gen = torch.Generator().manual_seed(seed)
        rows = self.recipe.split_rows(len(data), gen)
        start = self.weights()
        self.new_optimizers()  # each stage starts as the eager one does, as the app's does
        result = run_recipe(self.recipe, self, data, rows, lambda _purpose: gen)
        for name, weight in self.parameters.items():
            if not bool(torch.isfinite(weight).all()):
                self.load_weights(start)
                raise TrainingProgramError(f"training diverged: parameter {name} is not finite; "
                                           "the personal weights are kept as they were (a lower "
                                           "learning rate)")
        return result

    def _train_inputs(self, prepared: tuple[torch.Tensor, ...], labels: torch.Tensor
                      ) -> tuple[torch.Tensor, ...]:
        lam = () if self.recipe.lam is None else (self.recipe.lam.constant(0.0),)
        return (*prepared, labels, *lam)


def _contiguous(inputs: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
    return tuple(t.contiguous() for t in inputs)
