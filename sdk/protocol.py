"""The wire protocol of pfl-server and the SDK client: one definition both sides import.

Dependencies point server -> sdk, so it lives here; the SDK never imports ``pflkit.server``.
"""

from __future__ import annotations

import math
from typing import Any

MAX_ID = 2**31 - 1  # client, run, token ids and round numbers fit a 32-bit signed column

# A refusal the client may simply repeat carries this header (seconds to wait), whatever its
# status: 429 and 503 always may, a 409 only when the server sets it (e.g. an enrollment that
# lost a race for a client id; the token is still valid).
RETRY_AFTER = "Retry-After"

# An upload's safetensors metadata may hold its training metrics under this key, as a JSON
# object of at most MAX_METRICS names (each 1 to MAX_METRIC_NAME printable characters: they
# reach operators' terminals) to finite numbers; anything else is refused with 400.
METRICS_KEY = "metrics"
MAX_METRICS = 64
MAX_METRIC_NAME = 64

# safetensors metadata key: the sha256 of the tensor data after the header. Files at rest carry
# it (``tensorio``); any payload that carries it must match it, uploads included, else refused.
CHECKSUM_KEY = "pflkit.sha256"

def sendable(token: str) -> bool:
    """Whether a token or secret can travel in an HTTP header: printable ASCII, no spaces.

    Checked wherever one enters (the server's admin token, pfl-admin, the device client), so
    a stray newline or a non-ASCII character is refused at once, without showing the secret.
    """
    return bool(token) and all("!" <= c <= "~" for c in token)


# A task of a run whose devices clip (DP's dp_clip_on_device) carries the L2 norm the upload's
# change to the round's global state must stay within; the server refuses one over it (422).
CLIP_NORM_KEY = "clip_norm"


def task_clip_norm(task: dict[str, Any]) -> float | None:
    """The norm a task says to clip the upload's change to (None: the server clips)."""
    clip = task.get(CLIP_NORM_KEY)
    if clip is None:
        return None
    if isinstance(clip, bool) or not isinstance(clip, int | float) or not 0 < clip < math.inf:
        raise ValueError(f"task: {CLIP_NORM_KEY} must be a positive number, got {clip!r}")
    return float(clip)


def one_line_detail(body: Any) -> str:
    """An error answer's ``detail`` on one line, as an operator reads it.

    FastAPI's 422 lists are joined as ``key: msg``; the SDK client and pfl-admin both use it.
    """
    detail = body.get("detail", body) if isinstance(body, dict) else body
    if isinstance(detail, list):  # request validation: [{"loc": [...], "msg": "..."}, ...]
        detail = "; ".join(
            f"{'.'.join(str(p) for p in item.get('loc', [])[1:])}: {item.get('msg', item)}"
            if isinstance(item, dict) else str(item) for item in detail)
    return " ".join(str(detail).split())
