"""Uploads: admit (before the body is read), validate, store durably, then acknowledge.

No PyTorch: the update is checked against the run plan's schema on its raw safetensors bytes
(``update_check``), written to the blob store (fsync, rename), and only then is its row
committed, in the same transaction that checks the round is still open: one transaction for
all the updates that finished validating meanwhile (``group_commit``). The answer (the
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

from pflkit.sdk.protocol import MAX_METRIC_NAME, MAX_METRICS, METRICS_KEY, metric_name_ok
from pflkit.server.blobs import sha256
from pflkit.server.clip_check import clip_problem
from pflkit.server.errors import BadRequest, Conflict, Forbidden, Gone, Invalid, ServiceError
from pflkit.server.faults import crash_point
from pflkit.server.group_commit import GroupCommit
from pflkit.server.orm import Client, Round, Run, Update
from pflkit.server.store import Store
from pflkit.server.update_check import (
    MalformedUpdate,
    Schema,
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


@dataclass(frozen=True)
class Admission:
    """An upload that may come (checked before its body is read): what storing it needs."""

    client_id: int
    run_id: int
    round_id: int
    round_index: int
    num_samples: int
    schema: Schema  # the round's update schema (names, shapes, dtypes)
    prior: tuple[str, int] | None  # the hash and count of the client's update already in
    global_hash: str  # the state the round trains from
    clip_norm: float | None  # devices clip to it (dp_clip_on_device): the norm is checked


@dataclass(frozen=True)
class _Durable:
    """A valid update whose blob is durable: what its database row needs."""

    admission: Admission
    digest: str
    size: int
    metrics: dict[str, float]


Outcome = UploadReceipt | ServiceError  # an update's receipt, or its refusal


class Uploads:
    """Update uploads of sampled clients."""

    def __init__(self, store: Store, on_quorum: Callable[[], None] = lambda: None) -> None:
        self.store = store
        self.on_quorum = on_quorum  # e.g. wake the round keeper: a round may close now
        self._commits: GroupCommit[_Durable, UploadReceipt] = GroupCommit(self._commit_batch)

    def admit(self, client_id: int, run_id: int, round_index: int,
              num_samples: int) -> Admission:
        """Refuse an upload before its body is read, if its run, round or count already say so.

        A refused client then costs the server its headers, not ``max_upload_bytes`` of body.
        What may change meanwhile (the round closing, the run pausing, the client's own
        concurrent upload) is checked again in the transaction that records the update.
        """
        limit = self.store.settings.max_num_samples
        if num_samples > limit:
            raise Invalid(f"num_samples {num_samples} exceeds this server's limit of {limit} "
                          "(setting max_num_samples)")
        with self.store.transaction() as s:
            run = self.store.get_run(s, run_id)
            rnd = self.store.round_of(s, run, round_index)
            if rnd is None:
                raise Conflict(f"round {round_index} of run {run_id} has not opened "
                               f"(the current round is {run.rounds_done})")
            if client_id not in rnd.sampled:
                raise Forbidden(f"client {client_id} was not sampled in round {round_index}")
            terms = self.store.terms(s, run)
            if terms.secagg is not None:  # the server must never hold one device's update
                raise Conflict(f"run {run_id} aggregates securely: a device sends its masked "
                               "input through the round's secagg steps, never a plain update")
            prior = s.scalar(select(Update).where(Update.round_id == rnd.id,
                                                  Update.client_id == client_id))
            if prior is None:  # a replay is answered whatever the round's state now
                _still_open(run, rnd)
            return Admission(client_id, run_id, rnd.id, round_index, num_samples, terms.schema,
                             None if prior is None else (prior.blob_hash, prior.num_samples),
                             rnd.global_hash, terms.device_clip_norm)

    def accept(self, client_id: int, run_id: int, round_index: int, num_samples: int,
               body: bytes) -> UploadReceipt:
        """Admit, validate and store an update, then acknowledge (or refuse, changing nothing)."""
        return self.store_update(self.admit(client_id, run_id, round_index, num_samples), body)

    def store_update(self, admission: Admission, body: bytes) -> UploadReceipt:
        """Validate an admitted update, store it durably, then acknowledge (or refuse)."""
        a = admission
        digest = sha256(body)
        if a.prior is not None:
            return _replay(a, a.prior, digest)
        try:
            layout = read_layout(body)
            metrics = upload_metrics(layout.metadata)
        except MalformedUpdate as err:
            raise BadRequest(f"upload: {err}") from err
        problem = schema_problem(a.schema, {k: (t.shape, t.dtype)
                                            for k, t in layout.tensors.items()})
        if problem is None and (bad := first_non_finite(body, layout)) is not None:
            problem = f"tensor '{bad}' has NaN or Inf"
        if problem is None and a.clip_norm is not None:
            problem = clip_problem(body, layout, self.store.global_bytes.get(a.global_hash),
                                   a.clip_norm)
        if problem is not None:
            raise Invalid(f"client {a.client_id}: {problem}")
        self.store.blobs.put(body, digest)
        crash_point("upload_after_blob")
        return self._commits.submit(_Durable(a, digest, len(body), metrics))

    def _commit_batch(self, batch: list[_Durable]) -> list[Outcome]:
        """Record a batch of durable updates in one transaction (see ``group_commit``).

        A refusal (late, paused, a different update already sent) is that update's alone.
        A client's second upload in the batch, or every update if the commit fails on a
        unique constraint (a client's concurrent upload through another process), is
        recorded in a transaction of its own, where it meets its predecessor as a replay.
        """
        firsts: dict[tuple[int, int], int] = {}
        for i, d in enumerate(batch):
            firsts.setdefault((d.admission.round_id, d.admission.client_id), i)
        outcomes: dict[int, Outcome] = {}
        try:
            outcomes.update(zip(firsts.values(), self._record([batch[i] for i in firsts.values()]),
                                strict=True))
        except IntegrityError:
            pass
        for i in set(range(len(batch))) - set(outcomes):
            try:
                outcomes[i] = self._record([batch[i]])[0]
            except IntegrityError:  # recorded by another process meanwhile: now a replay
                outcomes[i] = self._record([batch[i]])[0]
        crash_point("upload_after_commit")
        return [outcomes[i] for i in range(len(batch))]

    def _record(self, batch: list[_Durable]) -> list[Outcome]:
        """Record updates of distinct (round, client) pairs in one transaction.

        One conditional write per round counts them, so a round that a closer claimed
        meanwhile refuses them all (late); their rows go in together.
        """
        round_ids = {d.admission.round_id for d in batch}
        due = False
        with self.store.transaction() as s:
            rounds = {r.id: r for r in s.scalars(select(Round).where(Round.id.in_(round_ids)))}
            runs = {r.id: r for r in s.scalars(select(Run).where(
                Run.id.in_({r.run_id for r in rounds.values()})))}
            priors = {(u.round_id, u.client_id): u for u in s.scalars(select(Update).where(
                Update.round_id.in_(round_ids),
                Update.client_id.in_({d.admission.client_id for d in batch})))}
            outcomes: list[Outcome] = [
                _outcome(d, rounds[d.admission.round_id], runs, priors) for d in batch]
            for round_id in round_ids:
                new = [i for i, d in enumerate(batch) if d.admission.round_id == round_id
                       and isinstance(outcomes[i], UploadReceipt) and not outcomes[i].duplicate]
                if not new:
                    continue
                counted = s.execute(update(Round).where(Round.id == round_id,
                                                        Round.status == "open")
                                    .values(received=Round.received + len(new)))
                if not counted.rowcount:  # type: ignore[attr-defined]
                    for i in new:
                        outcomes[i] = Gone(f"round {batch[i].admission.round_index} closed "
                                           "while the update arrived; late uploads are refused")
                    continue
                s.add_all(Update(round_id=round_id, client_id=batch[i].admission.client_id,
                                 blob_hash=batch[i].digest, size=batch[i].size,
                                 num_samples=batch[i].admission.num_samples,
                                 metrics=batch[i].metrics) for i in new)
                s.execute(update(Client).where(Client.id.in_(
                    [batch[i].admission.client_id for i in new])).values(last_seen=time.time()))
                s.refresh(rounds[round_id], ["received"])
                due = due or rounds[round_id].received >= self.store.quorum(s, rounds[round_id])
        if due:
            self.on_quorum()
        return outcomes


def _still_open(run: Run, rnd: Round) -> None:
    """Refuse a new update for a round that is no longer open or a run that is not active."""
    if rnd.status != "open":
        raise Gone(f"round {rnd.index} of run {run.id} is {rnd.status}; "
                   "late uploads are refused")
    if run.status != "active":
        raise Conflict(f"run {run.id} is {run.status}; uploads are not accepted")


def _outcome(d: _Durable, rnd: Round, runs: dict[int, Run],
             priors: dict[tuple[int, int], Update]) -> Outcome:
    """What a durable update gets, given the state it is recorded in (no write yet)."""
    a = d.admission
    prior = priors.get((a.round_id, a.client_id))
    try:
        if prior is not None:  # the same client raced itself
            return _replay(a, (prior.blob_hash, prior.num_samples), d.digest)
        _still_open(runs[rnd.run_id], rnd)
    except ServiceError as err:
        return err
    return UploadReceipt(a.run_id, a.round_index, d.digest, duplicate=False)


def _replay(a: Admission, prior: tuple[str, int], digest: str) -> UploadReceipt:
    """The answer to an upload for a round the client already sent an update for."""
    if prior == (digest, a.num_samples):
        return UploadReceipt(a.run_id, a.round_index, digest, duplicate=True)
    raise Conflict(f"client {a.client_id} already sent a different update for "
                   f"round {a.round_index}")


# The longest JSON of metrics within the rules: each name's characters written as JSON escapes
# (Python's json.dumps writes one outside ASCII as \uXXXX, one beyond the BMP as two: 12
# characters), a float's repr (at most 24) and the punctuation. Longer is refused unparsed.
MAX_METRICS_JSON = MAX_METRICS * (12 * MAX_METRIC_NAME + 40)


def upload_metrics(metadata: dict[str, str]) -> dict[str, float]:
    """The metrics an upload reports (see ``protocol.METRICS_KEY``); MalformedUpdate if bad.

    Numbers are parsed as floats, so a 5000-digit integer becomes inf and is refused like
    NaN, instead of overflowing; nesting is refused before it can exhaust the stack. Names
    are printable (no control characters): ``pfl-admin status`` shows them to operators.
    """
    raw = metadata.get(METRICS_KEY)
    if raw is None:
        return {}
    problem = f"metadata '{METRICS_KEY}' must be a JSON object of at most {MAX_METRICS} " \
              f"names (1 to {MAX_METRIC_NAME} printable characters) to finite numbers"
    if len(raw) > MAX_METRICS_JSON:
        raise MalformedUpdate(f"{problem}; it has {len(raw)} characters")
    try:
        metrics = json.loads(raw, parse_int=float, parse_constant=_no_constant)
    except (ValueError, RecursionError) as err:
        raise MalformedUpdate(f"{problem} ({type(err).__name__}: {str(err)[:80]})") from err
    if not isinstance(metrics, dict) or len(metrics) > MAX_METRICS or not all(
            metric_name_ok(k) and isinstance(v, float) and math.isfinite(v)
            for k, v in metrics.items()):
        raise MalformedUpdate(problem)
    return metrics


def _no_constant(name: str) -> float:
    raise ValueError(f"{name} is not a finite number")
