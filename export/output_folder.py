"""Where an export may be written: never over its own source, and only over an older export.

An export replaces ``--out`` as a whole, so an ``--out`` that is, contains or lies inside the
run's own files (its folder, ``config.toml``, ``global/``, ``clients/``, ``personalized/`` ...)
or the device folder, state file, global file or config it reads would delete them. Other
folders of a run (``exports/``, the default, or e.g. ``app/``) stay allowed. ``--force``
replaces only an empty folder or a previous export (one that holds ``model_card.json``) holding
nothing its card does not list: a file saved into it since (a device's trained weights beside
the trainer) is the user's, and replacing the folder would delete it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pflkit.export.card_file import CARD_FILE, read_card_json
from pflkit.export.contract import ExportError
from pflkit.sdk.rundir import RunDir
from pflkit.sdk.state_store import DeviceStateStore


def _within(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def _source_paths(info: dict[str, Any]) -> tuple[list[Path], list[Path]]:
    """(paths ``--out`` may neither be nor contain, folders it may not even lie inside)."""
    if "run" in info:
        run = RunDir(Path(info["run"]))
        folders = list(run.own_folders())
        return [run.path, *run.own_files(), *folders], folders
    paths = [Path(info[k]) for k in ("state_dir", "global", "config") if k in info]
    if "state_dir" in info:
        paths.append(Path(info["state_dir"]) / DeviceStateStore.FILE)
    if "global" in info:
        paths.append(Path(info["global"]).parent)
    return paths, []


def check_output(out: Path, info: dict[str, Any], force: bool) -> None:
    """Refuse an ``out`` that would overwrite the export's source or anything not an export."""
    target = out.resolve()
    kept, closed = _source_paths(info)
    for path in kept:
        if _within(path.resolve(), target):
            raise ExportError(f"--out {out} would replace {path}, which the export reads: "
                              f"choose another folder (e.g. under exports/)")
    for folder in closed:
        if _within(target, folder.resolve()):
            raise ExportError(f"--out {out} lies inside {folder}, which the run keeps its "
                              f"state in: choose another folder (e.g. under exports/)")
    if not out.exists() and not out.is_symlink():
        return
    if not out.is_dir() or out.is_symlink():
        raise ExportError(f"--out {out} exists and is not a folder: refusing to replace it")
    if not any(out.iterdir()):
        return
    if not force:
        raise ExportError(f"{out} already exists; use --force to replace it")
    if not (out / CARD_FILE).is_file():
        raise ExportError(f"--out {out} is not a previous export (no {CARD_FILE}): --force "
                          f"replaces only an export, so choose another folder")
    unlisted = _unlisted_entries(out)
    if unlisted:
        raise ExportError(f"--out {out} holds {', '.join(unlisted[:3])}, which its {CARD_FILE} "
                          f"does not list: --force replaces only an export's own files, so move "
                          f"them out first or choose another folder")


def _unlisted_entries(out: Path) -> list[str]:
    """The names in a previous export that are neither its card nor an artifact the card lists."""
    try:
        card = read_card_json(out / CARD_FILE)
    except ExportError as err:
        raise ExportError(f"--out {out}: its {CARD_FILE} is not a readable card ({err}): --force "
                          f"replaces only an export, so choose another folder") from err
    artifacts = card.get("artifacts") if isinstance(card, dict) else None
    listed = {a.get("file") for a in artifacts if isinstance(a, dict)} \
        if isinstance(artifacts, list) else set()
    return sorted(p.name for p in out.iterdir() if p.name != CARD_FILE and p.name not in listed)
