"""Uploads: admit (before the body is read), validate, store durably, then acknowledge.

No PyTorch: the update is checked against the run plan's schema on its raw safetensors bytes
(``update_check``), written to the blob store (fsync, rename), and only then is its row
committed, in the same transaction that checks the round is still open. The answer (the
acknowledgement) comes after that commit, so an acknowledged update is never lost.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from pflkit.sdk.protocol import MAX_METRIC_NAME, MAX_METRICS, METRICS_KEY
from pflkit.server.blobs import sha256
from pflkit.server.errors import BadRequest, Conflict, Forbidden, Gone, Invalid
from pflkit.server.faults import crash_point
from pflkit.server.orm import Client, Round, Run, Update
from pflkit.server.store import Store
from pflkit.server.update_check import (
    MalformedUpdate,
    first_non_finite,
    read_layout,
    schema_problem,
)


@dataclass(frozen=True)
class UploadReceipt:
    """The acknowledgement of a durable update."""

    run_id: int
    round: int
    sha256: str
    duplicate: bool


class Uploads:
    """Update uploads of sampled clients."""

    def __init__(self, store: Store, on_accept: Callable[[], None] = lambda: None) -> None:
        self.store = store
        self.on_accept = on_accept  # e.g. wake the round keeper: a quorum may be reached

    def admit(self, client_id: int, run_id: int, round_index: int, num_samples: int) -> None:
        """Refuse an upload before its body is read, if its run, round or count already say so.

        A refused client then costs the server its headers, not ``max_upload_bytes`` of body.
        :meth:`accept` repeats these checks in its transaction (they may change).
        """
        with self.store.transaction() as s:
            self._admit(s, client_id, run_id, round_index, num_samples)

    def _admit(self, s: Session, client_id: int, run_id: int, round_index: int,
               num_samples: int) -> tuple[Run, Round, Update | None]:
        """The run, the round and this client's earlier update of it, if the upload may come."""
        limit = self.store.settings.max_num_samples
        if num_samples > limit:
            raise Invalid(f"num_samples {num_samples} exceeds this server's limit of {limit} "
                          "(setting max_num_samples)")
        run = self.store.get_run(s, run_id)
        rnd = self.store.round_of(s, run, round_index)
        if rnd is None:
            raise Conflict(f"round {round_index} of run {run_id} has not opened "
                           f"(the current round is {run.rounds_done})")
        if client_id not in rnd.sampled:
            raise Forbidden(f"client {client_id} was not sampled in round {round_index}")
        prior = s.scalar(select(Update).where(Update.round_id == rnd.id,
                                              Update.client_id == client_id))
        if prior is None:  # a replay is answered whatever the round's state now
            if rnd.status != "open":
                raise Gone(f"round {round_index} of run {run_id} is {rnd.status}; "
                           "late uploads are refused")
            if run.status != "active":
                raise Conflict(f"run {run_id} is {run.status}; uploads are not accepted")
        return run, rnd, prior

    def accept(self, client_id: int, run_id: int, round_index: int, num_samples: int,
               body: bytes) -> UploadReceipt:
        """Validate an update, store it durably, then acknowledge (or refuse, changing nothing)."""
        digest = sha256(body)
        with self.store.transaction() as s:
            run, rnd, prior = self._admit(s, client_id, run_id, round_index, num_samples)
            if prior is not None:
                return self._replay(prior, run_id, round_index, digest, num_samples)
            plan = self.store.plan(s, run)
        try:
            layout = read_layout(body)
            metrics = upload_metrics(layout.metadata)
        except MalformedUpdate as err:
            raise BadRequest(f"upload: {err}") from err
        problem = schema_problem(plan.schema, {k: (t.shape, t.dtype)
                                               for k, t in layout.tensors.items()})
        if problem is None and (bad := first_non_finite(body, layout)) is not None:
            problem = f"tensor '{bad}' has NaN or Inf"
        if problem is not None:
            raise Invalid(f"client {client_id}: {problem}")
        self.store.blobs.put(body, digest)
        crash_point("upload_after_blob")
        try:
            with self.store.transaction() as s:
                # one conditional write: the round is still open (a closer that claimed it
                # waits for this commit or has already made it fail)
                still_open = s.execute(update(Round).where(Round.id == rnd.id,
                                                           Round.status == "open")
                                       .values(received=Round.received + 1))
                if not still_open.rowcount:  # type: ignore[attr-defined]
                    raise Gone(f"round {round_index} closed while the update arrived; "
                               "late uploads are refused")
                s.add(Update(round_id=rnd.id, client_id=client_id, blob_hash=digest,
                             num_samples=num_samples, size=len(body), metrics=metrics))
                s.execute(update(Client).where(Client.id == client_id)
                          .values(last_seen=time.time()))
        except IntegrityError:  # the same client raced itself: answer as for a replay
            with self.store.transaction() as s:
                prior = s.scalar(select(Update).where(Update.round_id == rnd.id,
                                                      Update.client_id == client_id))
                if prior is None:
                    raise
                return self._replay(prior, run_id, round_index, digest, num_samples)
        crash_point("upload_after_commit")
        self.on_accept()
        return UploadReceipt(run_id, round_index, digest, duplicate=False)

    @staticmethod
    def _replay(prior: Update, run_id: int, round_index: int, digest: str,
                num_samples: int) -> UploadReceipt:
        if prior.blob_hash == digest and prior.num_samples == num_samples:
            return UploadReceipt(run_id, round_index, digest, duplicate=True)
        raise Conflict(f"client {prior.client_id} already sent a different update for "
                       f"round {round_index}")


def upload_metrics(metadata: dict[str, str]) -> dict[str, float]:
    """The metrics an upload reports (see ``protocol.METRICS_KEY``); MalformedUpdate if bad.

    Numbers are parsed as floats, so a 5000-digit integer becomes inf and is refused like
    NaN, instead of overflowing; nesting is refused before it can exhaust the stack.
    """
    raw = metadata.get(METRICS_KEY)
    if raw is None:
        return {}
    problem = f"metadata '{METRICS_KEY}' must be a JSON object of at most {MAX_METRICS} " \
              f"names (up to {MAX_METRIC_NAME} characters) to finite numbers"
    if len(raw) > MAX_METRICS * (MAX_METRIC_NAME + 40):
        raise MalformedUpdate(f"{problem}; it has {len(raw)} characters")
    try:
        metrics = json.loads(raw, parse_int=float, parse_constant=_no_constant)
    except (ValueError, RecursionError) as err:
        raise MalformedUpdate(f"{problem} ({type(err).__name__}: {str(err)[:80]})") from err
    if not isinstance(metrics, dict) or len(metrics) > MAX_METRICS or not all(
            len(k) <= MAX_METRIC_NAME and isinstance(v, float) and math.isfinite(v)
            for k, v in metrics.items()):
        raise MalformedUpdate(problem)
    return metrics


def _no_constant(name: str) -> float:
    raise ValueError(f"{name} is not a finite number")
