"""Names to objects: models, datasets and algorithms from pflkit or from the user's package.

A run config names each of the three by a string that resolves, in this order, to

1. a built-in name (``twonn``, ``fmnist``, ``fedavg``, ...);
2. an import path ``package.module:attr`` (``myapp.nets:SensorNet``), imported on first use;
3. an entry point of the distribution that ships it, in the group ``pflkit.models``,
   ``pflkit.datasets`` or ``pflkit.algorithms`` (the entry point's name is the config name).

Every process resolves the same string the same way (pfl-sim, each uvicorn worker of
pfl-server, pfl-client, FederatedClient, pfl-export): nothing depends on a wrapper script
having filled a registry first. A failure is one :class:`ExtensionError` line naming the string
and the reason. Built-in names win over entry points of the same name.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")

GROUPS = {"model": "pflkit.models", "dataset": "pflkit.datasets",
          "algorithm": "pflkit.algorithms"}


class ExtensionError(ValueError):
    """A model, dataset or algorithm name that resolves to nothing usable (one line)."""


def _one_line(err: BaseException) -> str:
    text = " ".join(str(err).split()) or "no message"
    return f"{type(err).__name__}: {text}"


def _entry_points(kind: str) -> dict[str, EntryPoint]:
    return {ep.name: ep for ep in entry_points(group=GROUPS[kind])}


def import_path(kind: str, ref: str) -> object:
    """The object ``package.module:attr`` names (``attr`` may be dotted: ``Outer.inner``)."""
    module_name, _, attr = ref.partition(":")
    if not module_name or not attr:
        raise ExtensionError(f"{kind} '{ref}': an import path looks like 'package.module:attr'")
    try:
        obj: object = importlib.import_module(module_name)
    except Exception as err:  # any error raised while importing the user's module
        raise ExtensionError(f"{kind} '{ref}': cannot import {module_name} "
                             f"({_one_line(err)})") from err
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError as err:
            raise ExtensionError(f"{kind} '{ref}': {module_name} has no attribute "
                                 f"'{attr}'") from err
    return obj


def resolve(kind: str, ref: str, builtins: Mapping[str, T]) -> T | object:
    """The built-in, imported or entry-point object that ``ref`` names."""
    if ref in builtins:
        return builtins[ref]
    if ":" in ref:
        return import_path(kind, ref)
    found = _entry_points(kind).get(ref)
    if found is None:
        known = ", ".join([*sorted(builtins), *sorted(_entry_points(kind))])
        raise ExtensionError(f"unknown {kind} '{ref}'; known: {known}; or an import path "
                             "'package.module:attr'")
    try:
        return found.load()
    except Exception as err:  # the entry point's module failed to import
        raise ExtensionError(f"{kind} '{ref}' (entry point {found.value}): "
                             f"{_one_line(err)}") from err


def resolve_as(kind: str, ref: str, builtins: Mapping[str, T], entry: type[T],
               wrap: Callable[[Callable[..., object]], T], expected: str) -> T:
    """Resolve ``ref`` to an ``entry``; a user's plain callable is wrapped into one."""
    found = resolve(kind, ref, builtins)
    if isinstance(found, entry):
        return found
    if not callable(found):
        raise ExtensionError(f"{kind} '{ref}' is a {type(found).__name__}, not {expected}")
    return wrap(found)


def known_names(kind: str, builtins: Mapping[str, object]) -> list[str]:
    """Built-in names, then the entry points installed for ``kind``."""
    return [*sorted(builtins), *sorted(set(_entry_points(kind)) - set(builtins))]


def add_project_path(folder: Path | None = None) -> None:
    """Let ``module:attr`` paths find modules in ``folder`` (default: the working directory).

    The console scripts call this, as ``python -m`` and uvicorn do for the current folder, so
    a project's ``model.py`` next to its config resolves as ``model:Net`` without installing.
    It goes to the end of ``sys.path``: installed packages are never shadowed by a local file.
    uvicorn's spawned workers inherit the parent's ``sys.path``.
    """
    path = str(Path(folder or Path.cwd()).resolve())
    if path not in sys.path:
        sys.path.append(path)
