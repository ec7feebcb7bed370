"""The device's small JSON files: ``credentials.json`` (mode 0600) and ``cache.json``.

A damaged file is a one-line ValueError naming it, never a traceback from deep inside the
client: an app's owner can move it away and enroll again.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from pflkit.sdk.protocol import MAX_ID, sendable
from pflkit.sdk.tensorio import atomic_write_bytes

CREDENTIALS = "credentials.json"
CACHE = "cache.json"


class DeviceFiles:
    """The JSON files in one device's state folder."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = Path(state_dir)

    def read_json(self, name: str) -> dict[str, Any]:
        """One of the device's JSON files ({} if absent); damaged: a ValueError naming it."""
        path = self.state_dir / name
        if not path.is_file():
            return {}
        try:
            obj = json.loads(path.read_bytes())
        except (ValueError, RecursionError) as err:
            raise ValueError(f"{path}: not valid JSON ({type(err).__name__}: "
                             f"{str(err)[:80]})") from None
        if not isinstance(obj, dict):
            raise ValueError(f"{path}: a JSON object was expected, found {type(obj).__name__}")
        return obj

    def write_json(self, name: str, obj: dict[str, Any], private: bool = False) -> None:
        """Atomically replace one of the files (``private``: readable by the owner only)."""
        path = self.state_dir / name
        atomic_write_bytes(path, json.dumps(obj, sort_keys=True).encode())
        if private:
            os.chmod(path, 0o600)

    def read_credentials(self) -> dict[str, Any]:
        """credentials.json as enrollment wrote it ({} if not enrolled yet)."""
        creds = self.read_json(CREDENTIALS)
        if creds and not _valid_credentials(creds):
            raise ValueError(f"{self.state_dir / CREDENTIALS}: not the credentials "
                             f"enrollment writes (server, client_id in 0..{MAX_ID}, secret); "
                             f"move it away and enroll with a new token")
        return creds

    def write_credentials(self, server: str, answer: dict[str, Any]) -> dict[str, Any]:
        """Store what enrollment answered (mode 0600) and return it.

        An answer without a valid id and secret is refused (ValueError, nothing stored, the
        secret not shown): written, it would stop the device at its next start instead.
        """
        creds = {"server": server, "client_id": answer.get("client_id"),
                 "secret": answer.get("secret")}
        if not _valid_credentials(creds):
            raise ValueError(f"enrollment: the server's answer holds no client id in "
                             f"0..{MAX_ID} and sendable secret; nothing was stored")
        self.write_json(CREDENTIALS, creds, private=True)
        return creds


def _valid_credentials(creds: dict[str, Any]) -> bool:
    """Whether credentials hold a server URL, an id in range and a secret a header can carry."""
    client_id = creds.get("client_id")
    return (isinstance(creds.get("server"), str) and type(client_id) is int
            and 0 <= client_id <= MAX_ID and isinstance(creds.get("secret"), str)
            and sendable(creds["secret"]))
