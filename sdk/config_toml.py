"""The run config as TOML text: parsing, ``--set KEY=VALUE`` overrides, canonical writing.

Overrides address dotted TOML keys (``training.lr``) and their values are parsed as TOML, so a
command-line override means exactly what the same line in the file would.

A config is read only up to :data:`MAX_CONFIG_BYTES` and nested at most :data:`MAX_DEPTH` deep:
a wrong ``--config`` (a dataset file, ``/dev/zero``) or a hostile one is one line, not a run
out of memory or of stack (docs/simulator.md).
"""

from __future__ import annotations

import re
import sys
import tomllib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from pflkit.sdk.config_types import ConfigError, shown

MAX_CONFIG_BYTES = 1_000_000  # a run config is a few KB; pfl-server takes one of at most this
MAX_DEPTH = 32  # tables and arrays nested in one another ([algorithm.params] is 3 deep)


def parse_toml(text: str, source: str = "config") -> dict[str, Any]:
    """Parse TOML; a syntax error is a one-line :class:`ConfigError` naming ``source``."""
    try:
        parsed = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"{source}: not valid TOML ({err})") from None
    except (RecursionError, ValueError) as err:
        raise ConfigError(f"{source}: {_beyond_limits(err)}") from None
    return _within_depth(parsed, source)


def _beyond_limits(err: RecursionError | ValueError) -> str:
    """What tomllib could not read though it is TOML: Python's stack or digit limit."""
    if isinstance(err, RecursionError):
        return f"tables and arrays nested more than {MAX_DEPTH} deep"
    return f"a number of more than {sys.get_int_max_str_digits()} digits"


def _within_depth(value: Any, source: str) -> Any:
    """``value``, unless tables and arrays nest in it more than :data:`MAX_DEPTH` deep."""
    level, depth = [value], 0
    while level:
        depth += 1
        if depth > MAX_DEPTH:
            raise ConfigError(f"{source}: tables and arrays nested more than {MAX_DEPTH} deep")
        level = [child for node in level if isinstance(node, dict | list)
                 for child in (node.values() if isinstance(node, dict) else node)
                 if isinstance(child, dict | list)]
    return value


def read_toml(path: Path) -> dict[str, Any]:
    """A TOML file's contents; unreadable, too large, not UTF-8 or not TOML: a ConfigError line.

    At most :data:`MAX_CONFIG_BYTES` are read, whatever the file is (``/dev/zero`` too).
    """
    try:
        with path.open("rb") as file:
            data = file.read(MAX_CONFIG_BYTES + 1)
    except OSError as err:
        raise ConfigError(f"{path}: cannot read ({err.strerror})") from None
    if len(data) > MAX_CONFIG_BYTES:
        raise ConfigError(f"{path}: larger than {MAX_CONFIG_BYTES} bytes, the most a config "
                          "may hold (is it the config file?)")
    try:
        text = data.decode()
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not UTF-8 text") from None
    return parse_toml(text, str(path))


def check_config_size(text: str) -> str:
    """``text``, unless its UTF-8 form holds more than :data:`MAX_CONFIG_BYTES` (ValueError).

    For a config that arrives as text (``POST /v1/runs``): the same limit as a file's.
    """
    if len(text.encode(errors="surrogatepass")) > MAX_CONFIG_BYTES:
        raise ValueError(f"larger than {MAX_CONFIG_BYTES} bytes in UTF-8, the most a config "
                         "may hold")
    return text


def parse_value(text: str, key: str = "--set") -> Any:
    """A ``--set`` value as TOML (``0.05``, ``true``, ``[1, 2]``, ``"2"``); else the raw text.

    So ``--set data.dataset=digits`` needs no quotes, and ``--set rounds='"2"'`` is the string
    "2" (refused by the schema like the same line in a file). TOML beyond the limits of a
    file (too deep, too many digits) is a ConfigError naming ``key``.
    """
    try:
        value = tomllib.loads(f"value = {text}")["value"]
    except tomllib.TOMLDecodeError:
        return text
    except (RecursionError, ValueError) as err:
        raise ConfigError(f"{key}: {_beyond_limits(err)}") from None
    return _within_depth(value, key)


def apply_overrides(raw: Mapping[str, Any], overrides: Iterable[str]) -> dict[str, Any]:
    """``KEY=VALUE`` strings (dotted TOML keys, TOML values) applied to a parsed config."""
    out = _deep_copy(raw)
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError("--set expects KEY=VALUE (e.g. training.lr=0.05), got "
                              f"{shown(item)}")
        _set_path(out, key_path(key), parse_value(value.strip(), key.strip()))
    return out


def key_path(key: str) -> list[str]:
    """The parts of a dotted TOML key, read as the same line of a file reads it.

    ``training.lr``, ``training . lr`` and ``training."lr"`` are one key; a quoted part may hold
    a dot (``algorithm.params."a.b"``). Anything else (``training..lr``) is a ConfigError.
    """
    if key.count(".") >= MAX_DEPTH:  # tomllib takes seconds for a key of 10 000 parts
        raise ConfigError(f"--set: {shown(key.strip())}: tables nested more than {MAX_DEPTH} "
                          "deep")
    node: Any = None
    if "\n" not in key and "\r" not in key:  # nor "=" (split off): the line sets one key
        try:
            node = tomllib.loads(f"{key} = 0")
        except tomllib.TOMLDecodeError:
            pass
    if not isinstance(node, dict):
        raise ConfigError(f"--set: {shown(key.strip())} is not a TOML key (e.g. training.lr, "
                          'algorithm.params."a.b")')
    path = []
    while isinstance(node, dict):
        part, node = node.popitem()
        path.append(part)
    return path


def set_key(raw: dict[str, Any], dotted: str, value: Any) -> None:
    """Set one dotted key (plain names between the dots) in nested dicts, creating tables."""
    _set_path(raw, dotted.split("."), value)


def _set_path(raw: dict[str, Any], parts: list[str], value: Any) -> None:
    """Set the key ``parts`` names in nested dicts, creating tables on the way."""
    *path, leaf = parts
    node = raw
    for i, part in enumerate(path):
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ConfigError(f"{'.'.join(path[: i + 1])} is a value, not a table: "
                              f"cannot set {'.'.join(parts)}")
        node = child
    node[leaf] = value


def dump_toml(mapping: Mapping[str, Any]) -> str:
    """Nested dicts -> TOML text: top-level values first, then one table per dict."""
    lines = [f"{_toml_key(k)} = {_toml_value(v)}" for k, v in mapping.items()
             if not isinstance(v, dict)]
    tables = [(_toml_key(k), v) for k, v in mapping.items() if isinstance(v, dict)]
    while tables:
        title, table = tables.pop(0)
        lines.append(f"\n[{title}]")
        lines.extend(f"{_toml_key(k)} = {_toml_value(v)}" for k, v in table.items()
                     if not isinstance(v, dict))
        tables[:0] = [(f"{title}.{_toml_key(k)}", v) for k, v in table.items()
                      if isinstance(v, dict)]
    return "\n".join(lines).lstrip() + "\n"


def _toml_key(key: str) -> str:
    """A bare key where TOML allows one, else a quoted one (``--param "a b=1"``)."""
    return key if _BARE_KEY.fullmatch(key) else _toml_value(key)


_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")
_TOML_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f",
                 "\r": "\\r"}


def _toml_char(char: str) -> str:
    """One character of a TOML basic string, quotes, backslashes and control characters escaped.

    A raw newline in a path would leave config.toml unreadable, and the run unresumable.
    """
    if char in _TOML_ESCAPES:
        return _TOML_ESCAPES[char]
    return f"\\u{ord(char):04x}" if ord(char) < 0x20 or ord(char) == 0x7F else char


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return '"' + "".join(_toml_char(c) for c in value) + '"'
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, dict):  # in an array (steps = [{lr = 0.1}]): an inline table
        return "{" + ", ".join(f"{_toml_key(k)} = {_toml_value(v)}" for k, v in value.items()) \
            + "}"
    raise ConfigError(f"cannot write {value!r} to TOML")


def _deep_copy(mapping: Mapping[str, Any]) -> dict[str, Any]:
    return {k: _deep_copy(v) if isinstance(v, dict) else v for k, v in mapping.items()}
