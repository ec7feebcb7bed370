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

An import path is code to run, chosen by whoever wrote the config: where the config comes from
someone else (a run config posted to pfl-server, the task a server sends a device), its import
paths are checked against the process owner's :class:`ImportPolicy` before anything is
imported. The resolved object is checked to be a model, dataset or algorithm before it is
called (:func:`check_call`).
"""

from __future__ import annotations

import importlib
import inspect
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")

GROUPS = {"model": "pflkit.models", "dataset": "pflkit.datasets",
          "algorithm": "pflkit.algorithms"}


class ExtensionError(ValueError):
    """A model, dataset or algorithm name that resolves to nothing usable (one line)."""


class ImportRefused(ExtensionError):
    """An import path the process's owner did not allow (refused before importing anything)."""


def _is_module(name: str) -> bool:
    return all(part.isidentifier() for part in name.split("."))


def _is_import_path(ref: str) -> bool:
    module, _, attr = ref.partition(":")
    return _is_module(module) and _is_module(attr)


@dataclass(frozen=True)
class ImportPolicy:
    """Which import paths a process imports: the owner's choice, never the config's.

    Built-in names and installed entry points always resolve (installing a package is the
    owner's choice), and so does an import path an installed entry point of the same kind
    names. Any other ``package.module:attr`` must be allowed: ``allowed`` holds packages
    (``myapp`` allows ``myapp.nets:Net``, not ``myapp_x``) or exact import paths. Only names
    are compared: nothing is imported to decide.
    """

    allowed: frozenset[str] = frozenset()
    anything: bool = False  # the user's own config on their own machine (pfl-sim, pfl-export)
    setting: str = "allow_imports"  # where the owner allows more: named in every refusal

    def __post_init__(self) -> None:
        for name in self.allowed:
            if not (_is_module(name) or _is_import_path(name)):
                raise ValueError(f"{name!r} is neither a package name nor an import path "
                                 "'package.module:attr'")

    @classmethod
    def allowing(cls, names: Iterable[str], setting: str) -> ImportPolicy:
        """A policy allowing ``names`` (packages or import paths; commas separate too)."""
        split = (part.strip() for name in names for part in name.split(","))
        return cls(frozenset(part for part in split if part), setting=setting)

    def permits(self, kind: str, ref: str) -> bool:
        """Whether the import path ``ref`` of a ``kind`` may be imported here."""
        module = ref.partition(":")[0]
        if self.anything or ref in self.allowed or any(
                module == name or module.startswith(f"{name}.") for name in self.allowed):
            return True
        return ref in {ep.value for ep in _entry_points(kind).values()}

    def check(self, kind: str, ref: str) -> None:
        """Refuse an import path this process may not import, before importing anything."""
        if ":" not in ref or self.permits(kind, ref):
            return
        package = ref.partition(":")[0].split(".")[0]
        raise ImportRefused(f"{kind} '{ref}': not imported: package '{package}' is not in "
                            f"{self.setting}")


OWN_CONFIG = ImportPolicy(anything=True)  # pfl-sim, pfl-export: the user runs their own config


def _one_line(err: BaseException) -> str:
    text = " ".join(str(err).split()) or "no message"
    return f"{type(err).__name__}: {text}"


def _entry_points(kind: str) -> dict[str, EntryPoint]:
    return {ep.name: ep for ep in entry_points(group=GROUPS[kind])}


def import_path(kind: str, ref: str) -> object:
    """The object ``package.module:attr`` names (``attr`` may be dotted: ``Outer.inner``).

    ``attr`` names a public attribute of the module, never a module it imported nor a private
    one (``myapp.nets:torch.hub.load``, ``myapp.nets:__builtins__``), nor code another package
    defines (``myapp.nets:dumps`` after ``from json import dumps``, ``myapp.nets:system``
    after ``from os import system``): what an import path reaches is the package before
    ``:``'s own code, the name an :class:`ImportPolicy` checks. Code is a function, class or
    method, in Python or C (:func:`_home`); what the module lists in ``__all__`` is its own by
    its author's choice (``os:getcwd`` is ``posix``'s, and ``os`` exports it).
    """
    module_name, _, attr = ref.partition(":")
    if not _is_import_path(ref):
        raise ExtensionError(f"{kind} '{ref}': an import path looks like 'package.module:attr'")
    private = next((part for part in attr.split(".") if part.startswith("_")), None)
    if private is not None:
        raise ExtensionError(f"{kind} '{ref}': '{private}' is private: an import path names "
                             "a public attribute")
    try:
        module = importlib.import_module(module_name)
    except Exception as err:  # any error raised while importing the user's module
        raise ExtensionError(f"{kind} '{ref}': cannot import {module_name} "
                             f"({_one_line(err)})") from err
    obj: object = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError as err:
            raise ExtensionError(f"{kind} '{ref}': {module_name} has no attribute "
                                 f"'{attr}'") from err
        if inspect.ismodule(obj):
            raise ExtensionError(f"{kind} '{ref}': '{part}' is the module {obj.__name__}: "
                                 "name a module before the ':' of an import path")
    home = _home(obj)
    exported = getattr(module, "__all__", ())
    if home is not None and home.partition(".")[0] != module_name.partition(".")[0] and \
            not (isinstance(exported, list | tuple) and attr in exported):
        raise ExtensionError(f"{kind} '{ref}': '{attr}' is {home}'s, imported by "
                             f"{module_name}: name it in the package that defines it")
    return obj


def _home(obj: object) -> str | None:
    """The module whose code ``obj`` is; None for data a module built (an instance, a number).

    A C function names its module in ``__module__`` or is bound to it (``__self__``); a C
    method is its class's, as a Python method is its function's.
    """
    if not (inspect.isroutine(obj) or inspect.isclass(obj)):
        return None
    home = getattr(obj, "__module__", None)
    if isinstance(home, str):
        return home
    owner = getattr(obj, "__self__", None)
    owner = getattr(obj, "__objclass__", None) if owner is None else owner
    if inspect.ismodule(owner):
        return owner.__name__
    home = getattr(owner if inspect.isclass(owner) else type(owner), "__module__", None)
    return home if isinstance(home, str) else "builtins"


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


def check_call(kind: str, ref: str, fn: object, expected: str, *args: object,
               **kwargs: object) -> None:
    """Refuse ``fn`` unless it can be called with these arguments (without calling it)."""
    try:
        inspect.signature(fn).bind(*args, **kwargs)  # type: ignore[arg-type]
    except TypeError as err:
        raise ExtensionError(f"{kind} '{ref}' is not {expected} ({_one_line(err)})") from None
    except ValueError:  # a callable whose parameters cannot be read (a C builtin)
        raise ExtensionError(f"{kind} '{ref}' is not {expected} (its parameters cannot be "
                             "read)") from None


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
