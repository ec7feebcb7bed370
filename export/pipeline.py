"""One export: build the module, write each format, verify it in its runtime, write the card.

Verification is part of the export (:mod:`pflkit.export.verify`): each artifact runs in its
own runtime on real rows beside eager PyTorch; int8 is refused above an accuracy-drop
threshold (at every checked value of a runtime input) unless forced. Everything is written to
a temporary sibling folder that replaces ``out_dir`` only when every check passed, so a failed
export leaves no half-written model behind.

The card embedded in each artifact is the final card with empty ``artifacts`` and ``parity``
(an artifact cannot contain its own hash, and parity is measured after writing it) and an
``embedded_in`` entry naming that artifact's file, format and precision.

A new client's model (one built from a class distribution alone) is scored class-weighted under
that distribution beside the generic model (the card's ``versus_generic``), since its plain
accuracy on the balanced test set undersells a model made for a skewed client.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import torch

from pflkit.export.card_file import CARD_FILE, file_sha256
from pflkit.export.contract import Exportable, ExportError
from pflkit.export.formats import FORMATS, Format
from pflkit.export.golden import MAX_GOLDEN_SAMPLES, check_golden_data, golden_document
from pflkit.export.output_folder import check_output
from pflkit.export.selection import build_exportable, for_new_client, without_client
from pflkit.export.source import Source
from pflkit.export.training_program import (
    PROGRAM_FILE,
    PROGRAM_FORMAT,
    trainer_export,
    write_trainer,
)
from pflkit.export.verify import verify, versus_generic
from pflkit.sdk.algorithms.inference import DISTRIBUTION, Choice
from pflkit.sdk.tensorio import atomic_write_bytes

SCHEMA = "pflkit.model-card/2"
GOLDEN_FILE = "golden.json"
MAX_INT8_DROP_POINTS = 1.0  # points of test top-1 lost above which int8 is refused


@dataclass(frozen=True)
class ExportResult:
    """What an export wrote."""

    out_dir: Path
    card: dict[str, Any]

    def path(self, name: str) -> Path:
        """Locate a file of the export."""
        return self.out_dir / name


def _artifact(path: Path, fmt: Format | None, precision: str | None,
              kind: str = "golden") -> dict[str, Any]:
    entry: dict[str, Any] = {"file": path.name, "format": fmt.name if fmt else kind,
                             "precision": precision, "sha256": file_sha256(path),
                             "bytes": path.stat().st_size}
    if fmt is not None and fmt.max_batch is not None:
        entry["max_batch"] = fmt.max_batch
    return entry


def base_card(source: Source, ex: Exportable, mixture: dict[str, Any] | None) -> dict[str, Any]:
    """Describe the model before any artifact exists (docs/model-card.md)."""
    return {
        "schema_version": SCHEMA,
        "created": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "algorithm": source.algorithm.name,
        "model": source.algorithm.model_factory.name,
        "dataset": source.spec.name,
        "inputs": [s.to_card() for s in ex.inputs],
        "outputs": [s.to_card() for s in ex.outputs],
        "preprocessing": source.spec.preprocessing.to_dict(),
        "classes": list(source.spec.classes),
        "mixture": mixture,
        "source": dict(source.info),
        "privacy": source.privacy,  # null: no DP guarantee (docs/model-card.md)
        "artifacts": [],
        "parity": [],
    }


def embedded_card(card: dict[str, Any], file: str, fmt: str, precision: str) -> str:
    """The card stored inside ``file``: no artifacts or parity yet, and which file it is in."""
    try:
        return json.dumps({**card, "artifacts": [], "parity": [], "embedded_in": {
            "file": file, "format": fmt, "precision": precision}}, sort_keys=True,
            allow_nan=False)
    except ValueError as err:
        raise ExportError(f"the model card holds a NaN or infinite number: {err}") from err


def write_json(path: Path, obj: Any) -> None:
    """Write strict JSON (no NaN or Infinity, which JSON readers refuse) atomically."""
    try:
        text = json.dumps(obj, indent=2, sort_keys=True, allow_nan=False) + "\n"
    except ValueError as err:
        raise ExportError(f"{path.name} would hold a NaN or infinite number: {err}") from err
    atomic_write_bytes(path, text.encode())


def _scratch_folder(out: Path) -> Path:
    """A fresh hidden folder beside ``out`` (one line naming the folder when that fails)."""
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        return Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    except OSError as err:
        raise ExportError(f"cannot write the output {out}: {err.strerror or err} "
                          f"({err.filename or out.parent})") from err


def _new_client_distribution(source: Source, choice: Choice) -> torch.Tensor | None:
    """The class distribution a new client's model is built from (None: not such a model)."""
    for spec in source.algorithm.inference.choices:
        if spec.new_client and spec.kind == DISTRIBUTION and spec.name in choice.values:
            return torch.as_tensor(choice.values[spec.name], dtype=torch.float64)
    return None


def export_model(source: Source, choice: Choice, out_dir: Path,
                 formats: Sequence[str] = ("onnx", "executorch"), *, int8: bool = False,
                 force_int8: bool = False,
                 max_int8_drop_points: float = MAX_INT8_DROP_POINTS,
                 golden: int = 0, force: bool = False, trainer: bool = False,
                 trainer_params: dict[str, Any] | None = None) -> ExportResult:
    """Export, verify and describe one model; returns the card written to ``out_dir``.

    ``trainer``: also the personal part's training program (:mod:`.training_program`), built
    with the algorithm's hyperparameters overridden by ``trainer_params``.
    """
    out = Path(out_dir)
    formats = list(dict.fromkeys(formats))  # a format given twice is written (and listed) once
    unknown = sorted(set(formats) - set(FORMATS))
    if unknown or not formats:
        raise ExportError(f"unknown format(s) {unknown or formats}; known: {', '.join(FORMATS)}")
    if not 0.0 <= max_int8_drop_points <= 100.0:
        raise ExportError(f"the int8 accuracy drop limit must be in [0, 100] points, got "
                          f"{max_int8_drop_points:g}")
    check_output(out, source.info, force)
    if golden and not 1 <= golden <= MAX_GOLDEN_SAMPLES:
        raise ExportError(f"--golden-samples must be in 1..{MAX_GOLDEN_SAMPLES}, got {golden}")
    if golden:
        check_golden_data(source)
    if len(source.test) == 0:
        raise ExportError("no test rows to verify the export on")
    choice = without_client(source, choice)
    ex, mixture = build_exportable(source, choice)
    if int8 and not ex.quantizable:
        name = ex.runtime.name if ex.runtime else "its input"
        raise ExportError(f"int8 needs constant weights, but this model computes its weights "
                          f"from {name!r} in the graph; fix the choice (--choice {name}=VALUE) to "
                          f"quantize")
    card = base_card(source, ex, mixture)
    new_client = for_new_client(source.algorithm.inference.choices, choice)
    if new_client:  # known only by its choice (e.g. its classes): a new client
        card["source"]["new_client"] = True
    weights = _new_client_distribution(source, choice)
    if weights is not None:
        card["versus_generic"] = versus_generic(
            ex, source.algorithm.inference.global_model(source.global_state), source.test,
            weights)
    if trainer and (choice.head == "generic" or new_client
                    or ("run" in source.info and source.info.get("client") is None)):
        raise ExportError("--trainer trains one client's personal part: give --client N "
                          "(not --head generic or a new client's choice)")
    program = trainer_export(source, trainer_params) if trainer else None
    if program is not None:
        card["training"] = program.section
    sample = source.test.x[:64]
    tmp = _scratch_folder(out)
    try:
        for name in formats:
            fmt = FORMATS[name]
            variants = [("fp32", None)] + ([("int8", source.calibration.x)] if int8 else [])
            for precision, calibration in variants:
                file = f"model{'_int8' if calibration is not None else ''}.{fmt.suffix}"
                fmt.write(ex, tmp / file, embedded_card(card, file, fmt.name, precision), sample,
                          calibration)
                entry = verify(ex, fmt.load(tmp / file), source.test, file, precision,
                               weights)
                drop = entry.get("accuracy_drop_points", 0.0)
                if drop > max_int8_drop_points and not force_int8:
                    at = f" at {entry['runtime_input']} = {entry['accuracy_drop_value']}" \
                        if "accuracy_drop_value" in entry else ""
                    raise ExportError(
                        f"{file}: int8 loses {drop:.2f} points of test top-1{at} "
                        f"on {len(source.test)} rows, more than {max_int8_drop_points:.2f}; "
                        f"use --force-int8 to keep it")
                card["artifacts"].append(_artifact(tmp / file, fmt, precision))
                card["parity"].append(entry)
        if program is not None:
            files, entry = write_trainer(program, tmp, source, embedded_card(
                card, PROGRAM_FILE, PROGRAM_FORMAT, "fp32"))
            card["artifacts"] += [_artifact(f, None, "fp32" if f.suffix == ".pte" else None,
                                            PROGRAM_FORMAT if f.suffix == ".pte" else "safetensors")
                                  for f in files]
            card["parity"].append(entry)
        if golden:
            write_json(tmp / GOLDEN_FILE, golden_document(source, ex, golden, CARD_FILE))
            card["artifacts"].append(_artifact(tmp / GOLDEN_FILE, None, None))
        write_json(tmp / CARD_FILE, card)
        check_output(out, source.info, force)  # again: the folder may have changed meanwhile
        if out.exists():
            shutil.rmtree(out)
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return ExportResult(out, card)
