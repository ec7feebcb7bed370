"""The wire protocol of pfl-server and the SDK client: one definition both sides import.

Dependencies point server -> sdk, so it lives here; the SDK never imports ``pflkit.server``.
"""

from __future__ import annotations

import dataclasses
import json
import math
import numbers
import re
from typing import Any
from urllib.parse import urlsplit

MAX_ID = 2**31 - 1  # client, run, token ids and round numbers fit a 32-bit signed column

# A refusal the client may simply repeat carries this header (seconds to wait), whatever its
# status: 429 and 503 always may, a 409 only when the server sets it (e.g. an enrollment that
# lost a race for a client id; the token is still valid).
RETRY_AFTER = "Retry-After"
MAX_RETRY_AFTER_CHARS = 64  # a longer value is not read (3600 s never needs more; as on Android)

# An upload's safetensors metadata may hold its training metrics under this key, as a JSON
# object of at most MAX_METRICS names (each 1 to MAX_METRIC_NAME printable characters: they
# reach operators' terminals) to finite numbers; anything else is refused with 400.
METRICS_KEY = "metrics"
MAX_METRICS = 64
MAX_METRIC_NAME = 64


def metric_name_ok(name: Any) -> bool:
    """Whether the server takes this metric name: 1 to MAX_METRIC_NAME printable characters."""
    return isinstance(name, str) and 0 < len(name) <= MAX_METRIC_NAME and name.isprintable()


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


# A train task carries the server's max_num_samples: the most an update may weigh (its
# ``num_samples``, an integer in [1, MAX_NUM_SAMPLES]). A device whose round trained on more
# rows reports this many (``upload_weight``), as DP-FedAvg caps a client's weight, instead of
# having every re-send of its pending round refused (422) until the round closes.
MAX_NUM_SAMPLES_KEY = "max_num_samples"
MAX_NUM_SAMPLES = 10**9  # the upload route's bound on num_samples, and on a server's setting


def upload_weight(num_samples: int, task: dict[str, Any]) -> int:
    """The ``num_samples`` an upload reports: the rows trained on, at most the task's limit.

    A task without the limit (an older server) leaves it as it is. ``task`` passed
    ``task_problem``, which checks the limit's range.
    """
    limit = task.get(MAX_NUM_SAMPLES_KEY)
    return num_samples if limit is None else min(num_samples, limit)


def round_report(round_index: int, num_samples: Any, metrics: dict[str, float]
                 ) -> dict[str, str]:
    """A round's upload metadata (its finite ``metrics``), checked as the server checks it.

    A weight or metrics the server would refuse (400, 422) are a one-line ValueError: kept as
    the pending round, they would be re-sent and refused at every step until the round closed.
    """
    problem = None
    if isinstance(num_samples, bool) or not isinstance(num_samples, numbers.Integral) or \
            not 0 <= num_samples <= MAX_NUM_SAMPLES:
        problem = f"num_samples must be an integer in [0, {MAX_NUM_SAMPLES}]"
    elif len(metrics) > MAX_METRICS:
        problem = f"{len(metrics)} metrics: the server takes at most {MAX_METRICS}"
    elif not all(map(metric_name_ok, metrics)):
        problem = f"metric names must be 1 to {MAX_METRIC_NAME} printable characters"
    if problem is not None:
        raise ValueError(f"round {round_index}: the method's fit reported {problem}; nothing "
                         "is kept or uploaded")
    return {METRICS_KEY: json.dumps(metrics)}


MAX_DETAIL = 2000  # characters of a server's error message shown to a person


def one_line_detail(body: Any, hidden: tuple[str | None, ...] = ()) -> str:
    r"""An error answer's ``detail`` on one line, as an operator reads it.

    FastAPI's 422 lists are joined as ``key: msg``; the SDK client and pfl-admin both use it.
    Whatever the server sent, the line is printable (no escape sequence reaches a terminal:
    each unprintable character shows as ``?``) and at most ``MAX_DETAIL`` characters long.
    Each of ``hidden`` (secrets: printable, no spaces) shows as ``<secret>``, masked in the
    decoded text, so a server escaping one in its JSON (``\u0039`` for ``9``) cannot reveal it.
    """
    forms = sorted({form for secret in filter(None, hidden) for form in (
        secret, json.dumps(secret)[1:-1], json.dumps(secret, ensure_ascii=False)[1:-1])},
        key=len, reverse=True)  # the escaped forms hold the plain one: they go first
    detail = _masked(body.get("detail", body) if isinstance(body, dict) else body, forms)
    if isinstance(detail, list):  # request validation: [{"loc": [...], "msg": "..."}, ...]
        detail = "; ".join(
            f"{'.'.join(str(p) for p in item.get('loc', [])[1:])}: {item.get('msg', item)}"
            if isinstance(item, dict) else str(item) for item in detail)
    line = "".join(c if c.isprintable() else "?" for c in " ".join(str(detail).split()))
    line = _masked(line, forms)
    return line if len(line) <= MAX_DETAIL else line[:MAX_DETAIL] + "..."


def _masked(value: Any, forms: list[str]) -> Any:
    r"""``value`` with each of ``forms`` (a secret and its escapes) shown as ``<secret>``.

    In a structure, before it is printed: Python's repr escapes a secret's ``\`` and ``'``
    (an admin token with a backslash showed as ``ab\\cd``, unmasked). In text that is still
    JSON (a body too deep to parse) the secret also shows JSON-escaped. RecursionError for a
    structure nested past Python's limit (callers show the text instead).
    """
    if isinstance(value, str):
        for form in forms:
            value = value.replace(form, "<secret>")
        return value
    if isinstance(value, dict):
        return {_masked(k, forms): _masked(v, forms) for k, v in value.items()}
    if isinstance(value, list):
        return [_masked(v, forms) for v in value]
    return value


def strict_json(content: bytes | str) -> Any:
    """``content`` parsed as JSON whose objects name each key once, as Android's parser reads it.

    With a key named twice (``{"status": "wait", "status": "train"}``) which one counts is
    the parser's choice: Python's keeps the last, others the first or refuse. Such an object
    is a ValueError that does not quote the key. NaN and Infinity (Python's extensions) pass
    here: every number a device uses is range-checked where it is read.
    """
    def unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        if len(obj := dict(pairs)) != len(pairs):
            raise ValueError("an object names a key twice")
        return obj
    return json.loads(content, object_pairs_hook=unique)


def server_url_problem(url: str) -> str | None:
    """Why ``url`` cannot name a server (None: it can); never quotes it (it may hold a password).

    It must be http:// or https:// with a host (a missing scheme would fail every request as
    a network error, retried for minutes) and hold no user:password@ (it would replace the
    device's Bearer credentials, and URLs are printed and logged).
    """
    try:
        split = urlsplit(url)
        split.port  # noqa: B018 -- its check: a port out of [0, 65535] is a ValueError
    except ValueError:
        return "the server URL is not a URL (a malformed host or port)"
    if split.scheme.lower() not in ("http", "https") or not split.hostname:
        return "the server URL must be http:// or https:// and name a host, e.g. " \
            "https://fl.example.org"
    if split.username is not None or split.password is not None:
        return "the server URL holds a user name or password (user:password@): the client " \
            "sends its own credentials (Bearer), which they would replace; remove them"
    return None


# What a device accepts in a task (GET /v1/task): a server that sends anything else is broken
# or hostile, and the device stops with one line instead of acting on it.
TASK_STATUSES = ("train", "uploaded", "wait", "paused", "stopped", "finished")
MAX_WAIT = 3600.0  # seconds: the longest wait a server may ask for (Retry-After, retry_after)
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


def task_problem(task: dict[str, Any]) -> str | None:
    """Why a task (a JSON object) cannot be acted on (None: it can); never echoes a value."""
    if task.get("status") not in TASK_STATUSES:
        return f"status must be one of {', '.join(TASK_STATUSES)}"
    wait = task.get("retry_after")
    if isinstance(wait, bool) or not isinstance(wait, int | float) or \
            not 0 <= wait <= MAX_WAIT:
        return f"retry_after must be a number of seconds in [0, {MAX_WAIT:g}]"
    for key in ("run_id", "round"):
        value = task.get(key)
        if value is not None and not (type(value) is int and 0 <= value <= MAX_ID):
            return f"{key} must be an integer in [0, {MAX_ID}]"
    limit = task.get(MAX_NUM_SAMPLES_KEY)
    if limit is not None and not (type(limit) is int and 1 <= limit <= MAX_NUM_SAMPLES):
        return f"{MAX_NUM_SAMPLES_KEY} must be an integer in [1, {MAX_NUM_SAMPLES}]"
    if (problem := _secagg_problem(task)) is not None:
        return problem
    acts = task["status"] == "train" or (task["status"] == "finished" and task.get("config"))
    if acts:  # it trains or personalizes: everything that takes must be there
        if task.get("run_id") is None or task.get("round") is None:
            return "run_id and round are required"
        if not isinstance(task.get("config"), dict):
            return "config must be an object"
        if not isinstance(task.get("global_hash"), str) or not _SHA256.match(task["global_hash"]):
            return "global_hash must be 64 lowercase hex digits (a SHA-256)"
    return None


def _secagg_problem(task: dict[str, Any]) -> str | None:
    """Why a task's SecAgg setup, if it has one, cannot be used (None: it can, or has none).

    A setup never reads as "no secure aggregation" (``{}``, ``0``, ``""``): the update would
    leave in the clear. Its values are checked where it is used (``wire.setup_from_wire``).
    """
    from pflkit.sdk.secagg.messages import RoundSetup  # here: it imports this module
    from pflkit.sdk.secagg.wire import TASK_KEY

    setup = task.get(TASK_KEY)
    if setup is None:
        return None
    if not isinstance(setup, dict):
        return f"{TASK_KEY} must be an object (the round's secure-aggregation setup)"
    missing = sorted(f.name for f in dataclasses.fields(RoundSetup) if f.name not in setup)
    return f"{TASK_KEY} lacks {', '.join(missing)}" if missing else None


def preview_problem(preview: dict[str, Any]) -> str | None:
    """Why a task preview (GET /v1/task/preview) cannot be used (None: it can)."""
    run_id, config = preview.get("run_id"), preview.get("config")
    if config is None:
        return None
    if not isinstance(config, dict):
        return "config must be an object or null"
    if not (type(run_id) is int and 0 <= run_id <= MAX_ID):
        return f"run_id must be an integer in [0, {MAX_ID}]"
    return None
