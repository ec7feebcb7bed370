"""Where ``pfl-admin`` finds the server URL and the admin token.

Each value comes from the first place that has it:

1. flags: ``--url``, ``--token`` or ``--token-file``;
2. environment: ``PFLKIT_URL``, ``PFLKIT_ADMIN_TOKEN``;
3. a TOML file: ``--config FILE``, else ``PFLKIT_ADMIN_CONFIG``, else
   ``$XDG_CONFIG_HOME/pflkit/admin.toml`` (``~/.config/pflkit/admin.toml``), with the keys
   ``url`` and ``token`` or ``token_file`` (relative to the file's folder);
4. the URL defaults to pfl-server's own default address, ``http://127.0.0.1:8000``; the token
   has no default.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pflkit.sdk.config_toml import read_toml
from pflkit.sdk.config_types import ConfigError

URL_ENV = "PFLKIT_URL"
TOKEN_ENV = "PFLKIT_ADMIN_TOKEN"
CONFIG_ENV = "PFLKIT_ADMIN_CONFIG"
DEFAULT_URL = "http://127.0.0.1:8000"
FILE_KEYS = ("url", "token", "token_file")


class SettingsError(ValueError):
    """The URL or the token cannot be determined (one-line message)."""


@dataclass(frozen=True)
class Connection:
    """The server to talk to and the admin token to send."""

    url: str
    token: str


def default_config_path() -> Path:
    """``$XDG_CONFIG_HOME/pflkit/admin.toml`` (``~/.config`` when the variable is unset)."""
    base = os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config"
    return Path(base) / "pflkit" / "admin.toml"


def read_token_file(path: Path) -> str:
    """The token a file holds (surrounding whitespace dropped); unreadable or empty: error."""
    try:
        token = Path(path).read_text().strip()
    except (OSError, UnicodeDecodeError) as err:
        raise SettingsError(f"cannot read the admin token file {path}: "
                            f"{getattr(err, 'strerror', None) or err}") from None
    if not token:
        raise SettingsError(f"the admin token file {path} is empty")
    return token


def _config_file(path: Path | None) -> tuple[dict[str, Any], Path | None]:
    """The config file's keys and its path; ({}, None) when the default file does not exist."""
    explicit = path is not None or bool(os.environ.get(CONFIG_ENV))
    path = path or Path(os.environ.get(CONFIG_ENV) or default_config_path())
    if not path.is_file():
        if explicit:
            raise SettingsError(f"config file {path} does not exist")
        return {}, None
    try:
        values = read_toml(path)
    except ConfigError as err:
        raise SettingsError(f"config file {err}") from None
    unknown = sorted(set(values) - set(FILE_KEYS))
    if unknown:
        raise SettingsError(f"config file {path}: unknown key {unknown[0]!r} "
                            f"(known: {', '.join(FILE_KEYS)})")
    wrong = [k for k, v in values.items() if not isinstance(v, str) or not v.strip()]
    if wrong:
        raise SettingsError(f"config file {path}: {wrong[0]} must be a non-empty string")
    if "token" in values and "token_file" in values:
        raise SettingsError(f"config file {path}: give token or token_file, not both")
    return values, path


def resolve(url: str | None = None, token: str | None = None, token_file: Path | None = None,
            config: Path | None = None) -> Connection:
    """Apply the precedence above to the flag values given (None: flag not given)."""
    if token is not None and token_file is not None:
        raise SettingsError("give --token or --token-file, not both")
    values, path = _config_file(config)
    if token_file is not None:
        token = read_token_file(token_file)
    elif token is None:
        token = os.environ.get(TOKEN_ENV) or values.get("token")
        if token is None and "token_file" in values:
            assert path is not None
            token = read_token_file(path.parent / Path(values["token_file"]).expanduser())
    if not token or not token.strip():
        raise SettingsError(f"no admin token: give --token-file FILE (or --token), set "
                            f"{TOKEN_ENV}, or put token_file in {path or default_config_path()}")
    url = url or os.environ.get(URL_ENV) or values.get("url") or DEFAULT_URL
    if not url.startswith(("http://", "https://")):
        raise SettingsError(f"server URL {url!r} must start with http:// or https://")
    return Connection(url=url, token=token.strip())
