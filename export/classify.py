"""Run an export's files on real test images beside the eager PyTorch model (the demo's end).

The eager model is rebuilt from the card alone (its ``source`` and ``mixture.choice``, the
resolved choice any method writes), so the table also shows that the card describes the files
it sits next to. The card, not the user, names the run or device folder it is rebuilt from, so
the import paths of that folder's config are code the card's writer chose: they are imported
only when the user allowed them (``--allow-imports``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from pflkit.export.card_file import CARD_FILE, file_sha256, read_card_json
from pflkit.export.contract import ExportError
from pflkit.export.formats import FORMATS, Format
from pflkit.export.selection import build_exportable
from pflkit.export.source import Source, load_device_source, load_run_source
from pflkit.sdk.algorithms.inference import Choice
from pflkit.sdk.registry import ImportPolicy

NO_IMPORTS = ImportPolicy(setting="pfl-export classify --allow-imports")


def read_card(export_dir: Path) -> dict[str, Any]:
    """The folder's ``model_card.json``: read bounded, checked to be used without a traceback."""
    if not export_dir.is_dir():
        raise ExportError(f"{export_dir} is not a folder (give a pfl-export output folder)")
    path = export_dir / CARD_FILE
    if not path.is_file():
        raise ExportError(f"{export_dir} has no {CARD_FILE}: is it a pfl-export output folder?")
    card = read_card_json(path)
    problem = "" if isinstance(card, dict) else "it is not a JSON object"
    for key, kind in (("source", dict), ("artifacts", list), ("classes", list)):
        if not problem and not isinstance(card.get(key), kind):
            problem = f"its {key!r} is missing or not a JSON {kind.__name__}"
    if not problem and not all(isinstance(a, dict) and isinstance(a.get("file"), str)
                               and isinstance(a.get("sha256"), str)
                               and isinstance(a.get("format"), str) for a in card["artifacts"]):
        problem = "an artifact has no 'file', 'format' or 'sha256' text"
    mixture = card.get("mixture") if isinstance(card, dict) else None
    if not problem and not (mixture is None or isinstance(mixture, dict)
                            and isinstance(mixture.get("choice"), dict | None)):
        problem = "its 'mixture' is not null or a JSON object whose 'choice' is one"
    if not problem and not (card["classes"] and all(isinstance(c, str) for c in card["classes"])):
        problem = "its 'classes' are not class names"
    if problem:
        raise ExportError(f"{path}: not a pfl-export model card: {problem}")
    return card


def _checked_artifact(export_dir: Path, artifact: dict[str, Any]) -> Path:
    """An artifact's file: a plain name inside the folder whose bytes match the card's sha256."""
    name = artifact["file"]
    if not name or name in (".", "..") or Path(name).name != name or "\\" in name:
        raise ExportError(f"the card names the artifact {name!r}, which is not a file name in "
                          f"{export_dir}: refusing to load it")
    path = export_dir / name
    if not path.is_file():
        raise ExportError(f"{path}: the card's artifact is missing")
    if file_sha256(path) != artifact["sha256"]:
        raise ExportError(f"{path}: its sha256 does not match the model card (changed or "
                          f"damaged since the export)")
    return path


def _run_artifact(fmt: Format, path: Path, feeds: Any) -> torch.Tensor:
    """The artifact's first output; a runtime that cannot load or run it is one line."""
    try:
        return fmt.load(path)(feeds)[0]
    except Exception as err:  # onnxruntime and ExecuTorch raise their own exception types
        text = " ".join(str(err).split())[:300]
        raise ExportError(f"{path}: {fmt.name} cannot run it ({type(err).__name__}: "
                          f"{text})") from err


def source_paths(export_dir: Path, src: dict[str, Any], keys: tuple[str, ...]) -> list[Path]:
    """The card's source paths, found from here or from a folder above ``export_dir``.

    pfl-export writes them as it was given them, relative to the folder it ran in; classify
    may run elsewhere, but an export folder usually lies below that folder (``RUN/exports/``).
    """
    for key in keys:
        if not isinstance(src.get(key), str) or not src[key]:
            raise ExportError(f"the card's source.{key} is not a path: {src.get(key)!r}")
    paths = [Path(src[key]) for key in keys]
    for base in (Path(), *export_dir.resolve().parents):
        if all((base / p).exists() for p in paths):
            return [base / p for p in paths]
    named = ", ".join(f"source.{k} {src[k]!r}" for k in keys)
    raise ExportError(f"the card's {named}: not found from the current folder nor from any "
                      f"folder above {export_dir} (run classify where pfl-export ran)")


def source_from_card(card: dict[str, Any], export_dir: Path,
                     imports: ImportPolicy = NO_IMPORTS) -> Source:
    """Reload the weights and data an export was made from.

    ``imports``: what the source's config may import (default: built-in names and installed
    entry points only).
    """
    src = card["source"]
    for key in ("client", "round"):
        if not isinstance(src.get(key), int | None) or isinstance(src.get(key), bool):
            raise ExportError(f"the card's source.{key} is not a whole number: {src.get(key)!r}")
    if "run" in src:
        [run] = source_paths(export_dir, src, ("run",))
        return load_run_source(run, src.get("client"), src.get("round"), imports)
    if "state_dir" in src and "config" in src:
        return load_device_source(*source_paths(export_dir, src, ("state_dir", "global", "config")),
                                  imports)
    raise ExportError("the card's source names no run directory or device folder")


def choice_from_card(card: dict[str, Any]) -> Choice:
    """Rebuild the choice that produced the export from ``mixture.choice``."""
    return Choice.from_card((card.get("mixture") or {}).get("choice") or {})


def _test_rows(source: Source, count: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The first ``count`` rows the export was verified on (the card's ``source.test_data``).

    Stored preprocessed, as the model takes them: images, tabular rows and sequences alike,
    whether or not a dataset's raw pixels can be recovered (golden vectors need them).
    """
    if len(source.test) < count:
        raise ExportError(f"asked for {count} test rows, but the {source.info['test_data']} "
                          f"has only {len(source.test)}")
    return source.test.x[:count], source.test.y[:count]


def classify_table(export_dir: Path, card: dict[str, Any], count: int,
                   imports: ImportPolicy = NO_IMPORTS) -> str:
    """Tabulate the true label and each runtime's top-1 class and probability per image."""
    source = source_from_card(card, export_dir, imports)
    ex, _ = build_exportable(source, choice_from_card(card))
    inputs, labels = _test_rows(source, count)
    feeds = ex.feeds(inputs)
    columns = {"PyTorch (eager)": ex.eager(*feeds)[0]}
    by_format = {f.name: f for f in FORMATS.values()}
    for artifact in card["artifacts"]:
        fmt = by_format.get(artifact.get("format"))
        if fmt is not None:
            path = _checked_artifact(export_dir, artifact)
            columns[artifact["file"]] = _run_artifact(fmt, path, feeds)
    classes = card["classes"]
    width = max(len(c) for c in classes) + 5
    widths = [max(width, len(name)) for name in columns]
    lines = [f"  # | {'true':<{width}} | " +
             " | ".join(f"{name:<{w}}" for name, w in zip(columns, widths, strict=True))]
    for i, label in enumerate(labels):
        cells = []
        for logits, w in zip(columns.values(), widths, strict=True):
            probs = logits[i].double().softmax(0)
            top = int(probs.argmax())
            cells.append(f"{classes[top]} {probs[top]:.2f}".ljust(w))
        lines.append(f"{i:>3} | {classes[int(label)]:<{width}} | " + " | ".join(cells))
    agree = all(torch.equal(c.argmax(1), columns["PyTorch (eager)"].argmax(1))
                for c in columns.values())
    lines.append(f"all runtimes agree on top-1: {'yes' if agree else 'NO'}")
    return "\n".join(lines)
