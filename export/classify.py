"""Run an export's files on real test images beside the eager PyTorch model (the demo's end).

The eager model is rebuilt from the card alone (its ``source`` and ``mixture.choice``, the
resolved choice any method writes), so the table also shows that the card describes the files
it sits next to.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from pflkit.export.contract import ExportError
from pflkit.export.formats import FORMATS
from pflkit.export.golden import raw_images
from pflkit.export.selection import build_exportable
from pflkit.export.source import Source, load_device_source, load_run_source
from pflkit.sdk.algorithms.inference import Choice


def source_from_card(card: dict[str, Any]) -> Source:
    """Reload the weights and data an export was made from."""
    src = card["source"]
    if "run" in src:
        return load_run_source(Path(src["run"]), src.get("client"), src.get("round"))
    if "state_dir" in src and "config" in src:
        return load_device_source(Path(src["state_dir"]), Path(src["global"]),
                                  Path(src["config"]))
    raise ExportError("the card's source names no run directory or device folder")


def choice_from_card(card: dict[str, Any]) -> Choice:
    """Rebuild the choice that produced the export from ``mixture.choice``."""
    return Choice.from_card((card.get("mixture") or {}).get("choice") or {})


def classify_table(export_dir: Path, card: dict[str, Any], count: int) -> str:
    """Tabulate the true label and each runtime's top-1 class and probability per image."""
    source = source_from_card(card)
    ex, _ = build_exportable(source, choice_from_card(card))
    raw, labels = raw_images(source, count)
    feeds = ex.feeds(source.spec.preprocessing.apply(torch.from_numpy(raw)))
    columns = {"PyTorch (eager)": ex.eager(*feeds)[0]}
    by_format = {f.name: f for f in FORMATS.values()}
    for artifact in card["artifacts"]:
        fmt = by_format.get(artifact["format"])
        if fmt is not None:
            columns[artifact["file"]] = fmt.load(export_dir / artifact["file"])(feeds)[0]
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
