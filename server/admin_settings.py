"""Where ``pfl-admin`` finds the server URL and the admin token.

Each value comes from the first place that has it:

1. flags: ``--url``, ``--token`` or ``--token-file``;
2. environment: ``PFLKIT_URL``, ``PFLKIT_ADMIN_TOKEN``;
3. a TOML file: ``--config FILE``, else ``PFLKIT_ADMIN_CONFIG``, else
   ``$XDG_CONFIG_HOME/pflkit/admin.toml`` (``~/.config/pflkit/admin.toml``), with the keys
   ``url`` and ``token`` or ``token_file`` (relative to the file's folder);
4. the URL defaults to pfl-server's own default address, ``http://127.0.0.1:8000``; the token
   has no default.

A token is printable ASCII without spaces (it travels in an HTTP header); one that is not is
refused without being shown. So is a URL with ``user:password@`` (httpx would send them as
Basic credentials instead of the token). A file holding the token that other users may read
is used, with a warning (``chmod 600``); one over ``MAX_TOKEN_FILE`` bytes is refused unread.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from pflkit.sdk.config_toml import read_toml
from pflkit.sdk.config_types import ConfigError, closest
from pflkit.sdk.protocol import sendable, server_url_problem

URL_ENV = "PFLKIT_URL"
TOKEN_ENV = "PFLKIT_ADMIN_TOKEN"
CONFIG_ENV = "PFLKIT_ADMIN_CONFIG"
DEFAULT_URL = "http://127.0.0.1:8000"
FILE_KEYS = ("url", "token", "token_file")
MAX_TOKEN_FILE = 4096  # bytes: a token is one HTTP header (`openssl rand -hex 32` writes 65)


class SettingsError(ValueError):
    """The URL or the token cannot be determined (one-line message)."""


@dataclass(frozen=True)
class Connection:
    """The server to talk to and the admin token to send."""

    url: str
    token: str
    warnings: tuple[str, ...] = ()  # one line each, for stderr (e.g. a token file others read)


def default_config_path() -> Path:
    """``$XDG_CONFIG_HOME/pflkit/admin.toml`` (``~/.config`` when the variable is unset)."""
    base = os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config"
    return Path(base) / "pflkit" / "admin.toml"


def read_token_file(path: Path) -> str:
    """The token a file holds (surrounding whitespace dropped); unreadable or empty: error.

    At most ``MAX_TOKEN_FILE`` bytes are read: a path given by mistake (a log, a database,
    /dev/zero) is refused at once instead of being read whole or sent as a header.
    """
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_TOKEN_FILE + 1)
        if len(data) > MAX_TOKEN_FILE:
            raise SettingsError(f"the admin token file {path} is over {MAX_TOKEN_FILE} bytes: "
                                "not a token file (not shown here)")
        token = data.decode().strip()
    except (OSError, UnicodeDecodeError) as err:
        raise SettingsError(f"cannot read the admin token file {path}: "
                            f"{getattr(err, 'strerror', None) or err}") from None
    if not token:
        raise SettingsError(f"the admin token file {path} is empty")
    return token


def exposed_warning(path: Path) -> str | None:
    """A warning if other users may read or write ``path``, a file holding the admin token."""
    mode = stat.S_IMODE(Path(path).stat().st_mode)
    if not mode & 0o077:
        return None
    return (f"warning: {path} holds the admin token and other users may read it "
            f"(mode {mode:04o}): chmod 600 {path}")


def check_token(token: str, source: str) -> str:
    """The token without surrounding whitespace; refused (never shown) unless it can be sent."""
    token = token.strip()
    if not sendable(token):
        raise SettingsError(f"the admin token from {source} must be printable ASCII without "
                            "spaces or line breaks (it is not shown here)")
    return token


def check_url(url: str) -> str:
    """A server URL httpx can send to: http(s), a host, a valid port, no user:password@.

    A URL that may hold a password (it has an ``@``) is refused without being shown.
    """
    problem = server_url_problem(url)
    if problem is not None and "@" in url:
        raise SettingsError(problem)
    if not url.startswith(("http://", "https://")):
        raise SettingsError(f"server URL {url!r} must start with http:// or https://")
    try:
        host = httpx.URL(url).host
    except httpx.InvalidURL as err:
        raise SettingsError(f"server URL {url!r} is not valid: {err}") from None
    if not host:
        raise SettingsError(f"server URL {url!r} has no host")
    if problem is not None:
        raise SettingsError(problem)
    return url


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
        guess = closest(unknown[0], FILE_KEYS)
        hint = f"did you mean {guess!r}?" if guess else f"known: {', '.join(FILE_KEYS)}"
        raise SettingsError(f"config file {path}: unknown key {unknown[0]!r} ({hint})")
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
    source, holder = "--token", None  # where the token came from; the file holding it
    if token_file is not None:
        source, holder = f"--token-file {token_file}", token_file
    elif token is None and os.environ.get(TOKEN_ENV):
        token, source = os.environ[TOKEN_ENV], TOKEN_ENV
    elif token is None and "token" in values:
        token, source, holder = values["token"], f"config file {path}", path
    elif token is None and "token_file" in values:
        assert path is not None
        holder = path.parent / Path(values["token_file"]).expanduser()
        source = f"token_file {holder}"
    if holder is not None and token is None:
        token = read_token_file(holder)
    if not token or not token.strip():
        raise SettingsError(f"no admin token: give --token-file FILE (or --token), set "
                            f"{TOKEN_ENV}, or put token_file in {path or default_config_path()}")
    token = check_token(token, source)
    url = check_url(url or os.environ.get(URL_ENV) or values.get("url") or DEFAULT_URL)
    warning = None if holder is None else exposed_warning(holder)
    return Connection(url=url, token=token, warnings=(warning,) if warning else ())
