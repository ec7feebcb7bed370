"""Reading an export folder's files as input from outside: bounded, streamed, one-line errors.

An export folder may have been copied, pushed or edited by someone else, so its card is read
only once its size is known to be a card's (``MAX_CARD_BYTES``), and its artifacts, whatever
their size, are hashed in chunks rather than read into memory whole.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from pflkit.export.contract import ExportError

CARD_FILE = "model_card.json"
MAX_CARD_BYTES = 1 << 20  # a card is a few KiB; 1 MiB leaves room for 10^4 classes


def read_card_json(path: Path) -> Any:
    """The JSON in ``path``, refused in one line when larger than ``MAX_CARD_BYTES``.

    Only a regular file is opened (a FIFO would block, a device never end), and the read stops
    one byte past the limit, so a card that grows meanwhile is not read whole either.
    """
    if not path.is_file():
        raise ExportError(f"{path}: no model card there (not a regular file)")
    try:
        with path.open("rb") as file:
            data = file.read(MAX_CARD_BYTES + 1)
    except OSError as err:
        raise ExportError(f"{path}: cannot be read ({err.strerror or err})") from err
    if len(data) > MAX_CARD_BYTES:
        raise ExportError(f"{path}: more than {MAX_CARD_BYTES} bytes, too large for a model "
                          f"card (at most {MAX_CARD_BYTES // 1024} KiB): not read")
    try:
        return json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ExportError(f"{path}: not valid JSON ({err})") from err


def file_sha256(path: Path) -> str:
    """The sha256 of ``path``'s bytes, read in chunks (never the whole file in memory)."""
    try:
        with path.open("rb") as file:
            return hashlib.file_digest(file, "sha256").hexdigest()
    except OSError as err:
        raise ExportError(f"{path}: cannot be read ({err.strerror or err})") from err
