"""The federation service: the Coordinator driven by HTTP requests, persisted in a database.

Transport-free (routers in ``server/api`` translate :class:`ServiceError` into HTTP statuses).
The database is the source of truth, so any number of worker processes can serve one run:

* A round row holds its roster, its sample (drawn by :meth:`Coordinator.sample`, seeded), the
  hash of the global state it starts from, its deadline and the count of accepted updates.
* An upload is validated with :meth:`Coordinator.validate`, its bytes are written to the
  content-addressed blob store, and only then is its row committed, in the same transaction
  that checks the round is still open. The response (the acknowledgement) comes after that.
* A round closes at quorum or deadline: one worker claims it (``open -> closing``, a
  compare-and-set), rebuilds a Coordinator from the round row and re-folds the accepted blobs
  in client-id order with ``submit`` / ``close_round``. The new global state is written as a
  blob, then one commit closes the round and opens the next. A crash anywhere leaves either
  the old commit (the close is redone from the same blobs, on restart) or the new one, so no
  acknowledged update is lost or counted twice, and the fold order (client id) makes the
  result equal to the simulator's for the same clients.
"""

from __future__ import annotations

import json
import logging
import math
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from sqlalchemy import exists, func, select, union_all, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from pflkit.sdk.algorithms.base import Algorithm, State
from pflkit.sdk.builder import build_algorithm, data_spec
from pflkit.sdk.data.spec import DatasetSpec
from pflkit.sdk.protocol import MAX_ID, MAX_METRIC_NAME, MAX_METRICS, METRICS_KEY
from pflkit.sdk.registry import ExtensionError
from pflkit.sdk.run_config import ConfigError, Schedule, SimConfig
from pflkit.sdk.task_config import TaskConfig
from pflkit.sdk.tensorio import CorruptStateError, read_metadata, state_from_bytes, state_to_bytes
from pflkit.server.aggregation import aggregator_factory
from pflkit.server.blobs import BlobStore, sha256
from pflkit.server.coordinator import Coordinator, UpdateRejected
from pflkit.server.errors import (
    BadRequest,
    Conflict,
    Forbidden,
    Gone,
    Invalid,
    NotFound,
    Unauthorized,
)
from pflkit.server.faults import crash_point
from pflkit.server.orm import Client, EnrollmentToken, Round, Run, Update
from pflkit.server.settings import ServerSettings

log = logging.getLogger(__name__)
T = TypeVar("T")

LIVE = ("active", "paused")  # run statuses that block creating another run
CLOSING_LEASE = 300.0  # seconds after which another worker may retake a stuck close
ENROLL_ATTEMPTS = 50  # concurrent enrollments racing for the next free client id


class _ClientIdTaken(Exception):
    """A concurrent enrollment took the client id this one picked (PostgreSQL)."""


def hash_secret(secret: str) -> str:
    """Hash a token or client secret for storage (high-entropy: a plain SHA-256 suffices)."""
    return sha256(secret.encode())


@dataclass(frozen=True)
class RunSetup:
    """What a run's TOML config resolves to (built once per process and run)."""

    config: SimConfig
    algorithm: Algorithm
    schedule: Schedule
    spec: DatasetSpec  # the dataset's shapes and classes (its data is never read)


@dataclass(frozen=True)
class UploadReceipt:
    """The acknowledgement of a durable update."""

    run_id: int
    round: int
    sha256: str
    duplicate: bool


class FederationService:
    """Runs, rounds, enrollment and uploads on top of the Coordinator."""

    def __init__(self, settings: ServerSettings, sessions: sessionmaker[Session],
                 blobs: BlobStore) -> None:
        self.settings = settings
        self.sessions = sessions
        self.blobs = blobs
        self._setups: dict[int, RunSetup] = {}
        self._globals: dict[str, State] = {}
        self._global_bytes: dict[str, bytes] = {}
        self._validators: dict[int, Coordinator] = {}
        self._lock = threading.Lock()
        self._validator_build = threading.Lock()
        self.on_accept: Callable[[], None] = lambda: None  # the app wakes its round ticker here

    # -- helpers ----------------------------------------------------------------------------------
    @contextmanager
    def _session(self) -> Iterator[Session]:
        with self.sessions() as session, session.begin():
            yield session

    def setup(self, run: Run) -> RunSetup:
        """Return the algorithm and schedule of a run (cached)."""
        with self._lock:
            if run.id in self._setups:
                return self._setups[run.id]
        setup = build_setup(run.config_toml, self.settings)
        with self._lock:
            self._setups[run.id] = setup
        return setup

    def _newest_two(self, cache: dict[str, T], digest: str, load: Callable[[str], T]) -> T:
        """``cache[digest]``, loading it first; the cache keeps the two newest entries."""
        with self._lock:
            if digest in cache:
                return cache[digest]
        value = load(digest)
        with self._lock:
            if len(cache) >= 2:
                cache.pop(next(iter(cache)))
            cache[digest] = value
        return value

    def global_state(self, digest: str) -> State:
        """Return a global state by hash (the newest two are cached in memory)."""
        return self._newest_two(self._globals, digest, self.blobs.state)

    def _coordinator(self, run: Run, rnd: Round, robust: bool) -> Coordinator:
        setup = self.setup(run)
        factory = None
        if robust:
            s = self.settings
            factory = aggregator_factory(setup.algorithm.new_aggregator, s.aggregation,
                                         s.clip_norm, s.data_dir / "scratch", s.trim_fraction)
        return Coordinator(setup.algorithm, setup.schedule, rnd.roster,
                           self.global_state(rnd.global_hash), setup.config.seed, rnd.index,
                           aggregator_factory=factory)

    def _validator(self, run: Run, rnd: Round) -> Coordinator:
        """The open round's schema checker, built once per process and round.

        Concurrent first uploads wait for one build instead of each building their own.
        """
        with self._validator_build:
            coord = self._validators.get(rnd.id)
            if coord is None:
                coord = self._coordinator(run, rnd, robust=False)
                coord.open_round()
                self._validators = {rnd.id: coord}
        return coord

    @staticmethod
    def _current_run(session: Session) -> Run | None:
        return session.scalar(select(Run).order_by(Run.id.desc()).limit(1))

    @staticmethod
    def _round(session: Session, run: Run, index: int) -> Round | None:
        return session.scalar(select(Round).where(Round.run_id == run.id, Round.index == index))

    def _get_run(self, session: Session, run_id: int | None) -> Run:
        run = self._current_run(session) if run_id is None else session.get(Run, run_id)
        if run is None:
            raise NotFound("no such run" if run_id is not None else "no run has been created")
        return run

    # -- runs -------------------------------------------------------------------------------------
    def create_run(self, config_toml: str) -> Run:
        """Start a run from a pfl-sim TOML config (refused while another is active or paused)."""
        setup = build_setup(config_toml, self.settings)
        state = setup.algorithm.init_global(setup.config.seed)
        digest = self.blobs.put(state_to_bytes(state, {"rounds_done": "0"}))
        with self._session() as s:
            live = s.scalar(select(Run).where(Run.status.in_(LIVE)))
            if live is not None:
                raise Conflict(f"run {live.id} is {live.status}; stop it before creating another")
            run = Run(config_toml=config_toml, status="active",
                      rounds_total=setup.config.rounds, rounds_done=0, global_hash=digest)
            s.add(run)
        with self._lock:
            self._setups[run.id] = setup
        log.info("created run %d (%s, %d rounds)", run.id, setup.config.algorithm,
                 setup.config.rounds)
        return run

    def ensure_run(self, config_toml: str | None = None) -> None:
        """Create a run if the database has none: ``config_toml``, else settings.run_config."""
        if config_toml is None and self.settings.run_config is None:
            return
        with self._session() as s:
            if self._current_run(s) is not None:
                return
        self.create_run(config_toml or self.settings.run_config.read_text())  # type: ignore[union-attr]

    def recover(self) -> int:
        """After a crash: rounds left ``closing`` are reopened (their close is redone)."""
        with self._session() as s:
            result = s.execute(update(Round).where(Round.status == "closing")
                               .values(status="open", claimed_at=None))
            return int(result.rowcount or 0)  # type: ignore[attr-defined]

    def set_run_status(self, run_id: int, action: str) -> Run:
        """Pause, resume or stop a run."""
        allowed = {"pause": ("active",), "resume": ("paused",), "stop": LIVE}
        target = {"pause": "paused", "resume": "active", "stop": "stopped"}[action]
        with self._session() as s:
            run = self._get_run(s, run_id)
            if run.status not in allowed[action]:
                raise Conflict(f"cannot {action} run {run.id}: it is {run.status}")
            run.status = target
            rnd = self._round(s, run, run.rounds_done)
            if rnd is not None and rnd.status == "open":
                if action == "stop":
                    rnd.status = "abandoned"
                elif action == "resume":  # the paused time does not count against the clients
                    rnd.deadline_at = time.time() + self.settings.round_deadline
        return run

    def run_status(self, run_id: int | None) -> dict[str, Any]:
        """Progress of a run: status, rounds, the open round's participants, per-round metrics."""
        with self._session() as s:
            run = self._get_run(s, run_id)
            setup = self.setup(run)
            rounds = s.scalars(select(Round).where(Round.run_id == run.id)
                               .order_by(Round.index)).all()
            current = None
            for rnd in rounds:
                if rnd.status in ("open", "closing"):
                    senders = s.scalars(select(Update.client_id)
                                        .where(Update.round_id == rnd.id)).all()
                    current = {"index": rnd.index, "status": rnd.status, "sampled": rnd.sampled,
                               "received": sorted(senders), "deadline": rnd.deadline_at}
            history = [{"index": r.index, "closed_at": r.closed_at, "global_hash": r.result_hash,
                        "metrics": r.metrics} for r in rounds if r.status == "closed"]
            enrolled = s.scalar(select(func.count(Client.id))
                                .where(Client.revoked_at.is_(None))) or 0
            return {"id": run.id, "status": run.status, "algorithm": setup.config.algorithm,
                    "model": setup.config.model, "rounds_total": run.rounds_total,
                    "rounds_done": run.rounds_done, "global_hash": run.global_hash,
                    "enrolled_clients": enrolled, "current_round": current, "history": history}

    # -- enrollment -------------------------------------------------------------------------------
    def issue_token(self, client_id: int | None, ttl: float | None) -> tuple[int, str]:
        """Issue a one-time enrollment token (returned once; only its hash is stored)."""
        token = "pfe_" + secrets.token_urlsafe(32)
        with self._session() as s:
            if client_id is not None:
                if s.get(Client, client_id) is not None:
                    raise Conflict(f"client id {client_id} is already enrolled")
                taken = s.scalar(select(EnrollmentToken.id).where(
                    EnrollmentToken.client_id == client_id, EnrollmentToken.used_at.is_(None),
                    EnrollmentToken.revoked_at.is_(None)))
                if taken is not None:
                    raise Conflict(f"client id {client_id} is reserved by token {taken}")
            row = EnrollmentToken(token_hash=hash_secret(token), client_id=client_id,
                                  expires_at=None if ttl is None else time.time() + ttl)
            s.add(row)
            s.flush()
            return row.id, token

    def revoke_token(self, token_id: int) -> None:
        """Make an unused enrollment token useless."""
        with self._session() as s:
            row = s.get(EnrollmentToken, token_id)
            if row is None:
                raise NotFound(f"no enrollment token {token_id}")
            if row.used_at is not None:
                raise Conflict(f"enrollment token {token_id} was already used")
            row.revoked_at = row.revoked_at or time.time()

    def enroll(self, token: str) -> tuple[int, str]:
        """Trade an enrollment token for a client id and a per-client secret.

        A token without a reserved id gets the lowest id that no client holds and no unused
        token reserves (always within ``MAX_ID``). SQLite serializes
        enrollments (the token claim takes its write lock), but under PostgreSQL's READ
        COMMITTED two can pick the same id: the loser's insert fails, its claim rolls back,
        and it tries again with the next id.
        """
        for _ in range(ENROLL_ATTEMPTS):
            try:
                return self._enroll_once(token)
            except _ClientIdTaken:
                continue
        raise Conflict(f"{ENROLL_ATTEMPTS} concurrent enrollments took the client ids this one "
                       "picked; the token is still valid: try again", retry_after=1.0)

    def _enroll_once(self, token: str) -> tuple[int, str]:
        secret = "pfc_" + secrets.token_urlsafe(32)
        now = time.time()
        with self._session() as s:
            row = s.scalar(select(EnrollmentToken)
                           .where(EnrollmentToken.token_hash == hash_secret(token)))
            if row is None:
                raise Unauthorized("unknown enrollment token")
            if row.revoked_at is not None:
                raise Forbidden("this enrollment token was revoked")
            if row.expires_at is not None and row.expires_at < now:
                raise Forbidden("this enrollment token has expired")
            claimed = s.execute(update(EnrollmentToken).where(
                EnrollmentToken.id == row.id, EnrollmentToken.used_at.is_(None))
                .values(used_at=now))
            if not claimed.rowcount:  # type: ignore[attr-defined]
                raise Conflict("this enrollment token was already used")
            client_id = row.client_id
            reserved = client_id is not None
            if client_id is None:
                client_id = _lowest_free_id(s)
                if client_id is None:
                    raise Conflict(f"every client id up to {MAX_ID} is taken")
            s.add(Client(id=client_id, secret_hash=hash_secret(secret)))
            try:
                s.flush()
            except IntegrityError as err:
                if not reserved:
                    raise _ClientIdTaken(client_id) from err
                raise Conflict(f"client id {client_id} is already enrolled") from err
        log.info("enrolled client %d", client_id)
        return client_id, secret

    def authenticate(self, secret: str) -> int:
        """Return the client id of a secret; unknown -> 401, revoked -> 403."""
        with self._session() as s:
            client = s.scalar(select(Client).where(Client.secret_hash == hash_secret(secret)))
            if client is None:
                raise Unauthorized("unknown client credentials")
            if client.revoked_at is not None:
                raise Forbidden(f"client {client.id} has been revoked")
            return client.id

    def revoke_client(self, client_id: int) -> None:
        """Revoke a client: its secret stops working; it leaves future rosters."""
        with self._session() as s:
            client = s.get(Client, client_id)
            if client is None:
                raise NotFound(f"no client {client_id}")
            client.revoked_at = client.revoked_at or time.time()

    def list_clients(self) -> list[dict[str, Any]]:
        """Every enrolled client with its status."""
        with self._session() as s:
            return [{"id": c.id, "enrolled_at": c.enrolled_at, "revoked": c.revoked_at is not None,
                     "last_seen": c.last_seen}
                    for c in s.scalars(select(Client).order_by(Client.id))]

    # -- tasks and downloads ---------------------------------------------------------------------
    def task(self, client_id: int) -> dict[str, Any]:
        """Tell a client what to do now: train (with everything it needs), wait, or stop.

        A finished run also sends its config, so clients can run the algorithm's
        post-federation stage (``personalize``) on the final global state.
        """
        retry = 2 * self.settings.tick_seconds
        with self._session() as s:
            run = self._current_run(s)
            if run is None:
                return {"status": "wait", "retry_after": retry}
            # "round" is the run's current round whatever the status: a client holding a
            # trained round keeps it until the run has moved past it (a pause does not)
            base = {"run_id": run.id, "round": run.rounds_done, "retry_after": retry,
                    "global_hash": run.global_hash}
            if run.status == "finished":
                return {**base, "status": "finished",
                        "config": self._task_config(run, run.rounds_total)}
            if run.status != "active":
                return {**base, "status": run.status}
            rnd = self._round(s, run, run.rounds_done)
            if rnd is None or rnd.status != "open" or client_id not in rnd.sampled:
                return {**base, "status": "wait"}
            sent = s.scalar(select(Update.id).where(Update.round_id == rnd.id,
                                                    Update.client_id == client_id))
            return {**base, "status": "uploaded" if sent is not None else "train",
                    "deadline": rnd.deadline_at,
                    "global_hash": rnd.global_hash, "config": self._task_config(run, rnd.index)}

    def _task_config(self, run: Run, round_index: int) -> dict[str, Any]:
        setup = self.setup(run)
        return TaskConfig.of(setup.config, setup.spec, setup.schedule.lr_at(round_index)
                             ).to_wire()

    def check_global(self, digest: str) -> None:
        """Raise NotFound unless some run or round names this global state and it is stored."""
        with self._session() as s:
            known = s.scalar(select(Run.id).where(Run.global_hash == digest).limit(1)) or \
                s.scalar(select(Round.id).where(Round.global_hash == digest).limit(1))
        if known is None or not self.blobs.exists(digest):
            raise NotFound(f"no global state {digest}")

    def global_blob(self, digest: str) -> bytes:
        """Return a global state's bytes (never another client's update: see check_global).

        The newest two are kept in memory: every sampled client downloads the same state at
        the start of a round, and one shared ``bytes`` object serves all those responses.
        """
        self.check_global(digest)
        return self._newest_two(self._global_bytes, digest, self.blobs.get)

    def zero_shot_head(self, run_id: int | None, distribution: list[float]) -> bytes:
        """FedRoD: the personalized head for a class distribution from the run's newest global."""
        from pflkit.sdk.algorithms.fedrod import ClassDistributionError, zero_shot_head

        with self._session() as s:
            run = self._get_run(s, run_id)
            algorithm, digest = self.setup(run).config.algorithm, run.global_hash
        if not algorithm.startswith("fedrod"):
            raise Conflict(f"run {run.id} trains {algorithm}, not FedRoD: it has no heads")
        try:
            head = zero_shot_head(self.global_state(digest), distribution)
        except (ClassDistributionError, ValueError) as err:
            raise Invalid(str(err)) from err
        return state_to_bytes(head, {"global_hash": digest})

    # -- uploads ----------------------------------------------------------------------------------
    def admit_upload(self, client_id: int, run_id: int, round_index: int,
                     num_samples: int) -> None:
        """Refuse an upload before its body is read, if its address or count already says so.

        A refused client then costs the server its headers, not ``max_upload_bytes`` of body.
        :meth:`accept_upload` repeats these checks in its transaction (they may change).
        """
        with self._session() as s:
            self._admit(s, client_id, run_id, round_index, num_samples)

    def _admit(self, s: Session, client_id: int, run_id: int, round_index: int,
               num_samples: int) -> tuple[Run, Round, Update | None]:
        """The run, the round and this client's earlier update of it, if the upload may come."""
        limit = self.settings.max_num_samples
        if num_samples > limit:
            raise Invalid(f"num_samples {num_samples} exceeds this server's limit of {limit} "
                          "(setting max_num_samples)")
        run = self._get_run(s, run_id)
        rnd = self._round(s, run, round_index)
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

    def accept_upload(self, client_id: int, run_id: int, round_index: int, num_samples: int,
                      body: bytes) -> UploadReceipt:
        """Validate an update, store it durably, then acknowledge (or refuse, changing nothing)."""
        digest = sha256(body)
        with self._session() as s:
            run, rnd, prior = self._admit(s, client_id, run_id, round_index, num_samples)
            if prior is not None:
                return self._replay(prior, run_id, round_index, digest, num_samples)
        try:
            update_state = state_from_bytes(body, "upload")
            metrics = _upload_metrics(body)
        except CorruptStateError as err:
            raise BadRequest(str(err)) from err
        try:
            self._validator(run, rnd).validate(client_id, num_samples, update_state)
        except UpdateRejected as err:
            raise Invalid(str(err)) from err
        self.blobs.put(body, digest)
        crash_point("upload_after_blob")
        try:
            with self._session() as s:
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
            with self._session() as s:
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

    # -- rounds -----------------------------------------------------------------------------------
    def tick(self) -> None:
        """Open the first round when enough clients enrolled; close rounds at quorum/deadline."""
        try:
            round_id = self._claim_due_round()
        except IntegrityError:  # another worker opened the same round first
            return
        if round_id is not None:
            self.close_round(round_id)

    def _claim_due_round(self) -> int | None:
        now = time.time()
        with self._session() as s:
            run = self._current_run(s)
            if run is None or run.status != "active":
                return None
            rnd = self._round(s, run, run.rounds_done)
            if rnd is None:
                if run.rounds_done < run.rounds_total:
                    self._open_round(s, run)
                return None
            stuck = rnd.status == "closing" and (rnd.claimed_at or 0) < now - CLOSING_LEASE
            if rnd.status == "open":
                # the round's first uploads and downloads should not pay for these builds
                self._validator(run, rnd)
                self._newest_two(self._global_bytes, rnd.global_hash, self.blobs.get)
                revoked = set(s.scalars(select(Client.id).where(Client.revoked_at.isnot(None))))
                reachable = len(set(rnd.sampled) - revoked)
                quorum = min(self.settings.min_clients or len(rnd.sampled), reachable)
                due = rnd.received >= quorum or now >= rnd.deadline_at
            else:
                due = stuck
            if not due:
                return None
            same = [Round.id == rnd.id, Round.status == rnd.status]
            if stuck:  # retake only the claim we saw, not a fresh one
                same.append(Round.claimed_at == rnd.claimed_at)
            claim = s.execute(update(Round).where(*same).values(status="closing", claimed_at=now))
            return rnd.id if claim.rowcount else None  # type: ignore[attr-defined]

    def _open_round(self, s: Session, run: Run) -> Round | None:
        setup = self.setup(run)
        roster = sorted(s.scalars(select(Client.id).where(Client.revoked_at.is_(None))))
        needed = max(setup.schedule.clients_per_round or 1, self.settings.min_enrolled or 1)
        if len(roster) < needed:
            return None
        index = run.rounds_done
        coord = Coordinator(setup.algorithm, setup.schedule, roster,
                            self.global_state(run.global_hash), setup.config.seed, index)
        rnd = Round(run_id=run.id, index=index, status="open", roster=roster,
                    sampled=coord.sample(index), global_hash=run.global_hash,
                    deadline_at=time.time() + self.settings.round_deadline, metrics={})
        s.add(rnd)
        s.flush()
        log.info("run %d: round %d open, sampled %s", run.id, index, rnd.sampled)
        return rnd

    def close_round(self, round_id: int) -> None:
        """Fold the round's accepted blobs (client-id order), store the result, commit.

        A close that raises (a blob unreadable, the disk full, the database gone) gives its
        claim back at once, so the next tick of any worker retries it, instead of the round
        staying ``closing`` until the lease expires.
        """
        with self._session() as s:
            rnd = s.get(Round, round_id)
            assert rnd is not None
            run = s.get(Run, rnd.run_id)
            assert run is not None
            updates = s.scalars(select(Update).where(Update.round_id == round_id)
                                .order_by(Update.client_id)).all()
        try:
            self._close_claimed(run, rnd, list(updates))
        except Exception:
            with self._session() as s:
                s.execute(update(Round).where(Round.id == round_id, Round.status == "closing",
                                              Round.claimed_at == rnd.claimed_at)
                          .values(status="open", claimed_at=None))
            log.warning("run %d: closing round %d failed; it is open again", run.id, rnd.index)
            raise

    def _close_claimed(self, run: Run, rnd: Round, updates: list[Update]) -> None:
        round_id = rnd.id
        started = time.perf_counter()
        coord = self._coordinator(run, rnd, robust=True)
        plan = coord.open_round()
        if plan.sampled != rnd.sampled:
            raise RuntimeError(f"round {rnd.index}: resampling gave {plan.sampled}, "
                               f"stored {rnd.sampled}")
        for row in updates:
            coord.submit(row.client_id, row.num_samples, self.blobs.state(row.blob_hash))
            crash_point("close_mid_fold")
        new_global = coord.close_round()
        digest = self.blobs.put(state_to_bytes(new_global, {"rounds_done": str(rnd.index + 1)}))
        crash_point("close_after_blob")
        metrics = _round_metrics(updates)
        with self._session() as s:
            # only under the claim whose updates were folded: a replica starting up reopens
            # closing rounds (recover), so uploads can land before the next claim
            done = s.execute(update(Round).where(Round.id == round_id,
                                                 Round.status == "closing",
                                                 Round.claimed_at == rnd.claimed_at)
                             .values(status="closed", closed_at=time.time(),
                                     result_hash=digest, metrics=metrics))
            if not done.rowcount:  # type: ignore[attr-defined]
                return  # another worker finished it or claimed it anew
            run = s.get(Run, rnd.run_id)
            assert run is not None
            run.rounds_done = rnd.index + 1
            run.global_hash = digest
            if run.rounds_done >= run.rounds_total:
                run.status = "finished"
            elif run.status == "active":
                self._open_round(s, run)
        log.info("run %d: round %d closed with %d/%d updates in %.3fs", run.id, rnd.index,
                 len(updates), len(rnd.sampled), time.perf_counter() - started)


def build_setup(config_toml: str, settings: ServerSettings) -> RunSetup:
    """Resolve a pfl-sim TOML into algorithm and schedule (the dataset's files are not read)."""
    try:
        config = SimConfig.from_toml(config_toml, "config_toml")
        spec = data_spec(config)
        algorithm = build_algorithm(config, spec)
    except (ConfigError, ExtensionError, KeyError, ValueError, OSError) as err:
        raise Invalid(f"run config: {err}") from err
    schedule = config.schedule()
    if settings.clients_per_round is not None:
        schedule = replace(schedule, clients_per_round=settings.clients_per_round)
    return RunSetup(config, algorithm, schedule, spec)


def _lowest_free_id(s: Session) -> int | None:
    """The lowest client id that no client holds and no unused token reserves (None: full)."""
    taken = union_all(
        select(Client.id.label("id")),
        select(EnrollmentToken.client_id.label("id")).where(
            EnrollmentToken.client_id.isnot(None), EnrollmentToken.used_at.is_(None),
            EnrollmentToken.revoked_at.is_(None)),
    ).cte("taken")
    if s.scalar(select(taken.c.id).where(taken.c.id == 0).limit(1)) is None:
        return 0
    after = taken.alias("after")
    return s.scalar(select(func.min(taken.c.id + 1)).where(
        taken.c.id < MAX_ID, ~exists().where(after.c.id == taken.c.id + 1)))


def _upload_metrics(body: bytes) -> dict[str, float]:
    """The metrics an upload reports (see ``protocol.METRICS_KEY``); CorruptStateError if bad.

    Numbers are parsed as floats, so a 5000-digit integer becomes inf and is refused like
    NaN, instead of overflowing; nesting is refused before it can exhaust the stack.
    """
    raw = read_metadata(body).get(METRICS_KEY)
    if raw is None:
        return {}
    problem = f"metadata '{METRICS_KEY}' must be a JSON object of at most {MAX_METRICS} " \
              f"names (up to {MAX_METRIC_NAME} characters) to finite numbers"
    if len(raw) > MAX_METRICS * (MAX_METRIC_NAME + 40):
        raise CorruptStateError(f"{problem}; it has {len(raw)} characters")
    try:
        metrics = json.loads(raw, parse_int=float, parse_constant=_no_constant)
    except (ValueError, RecursionError) as err:
        raise CorruptStateError(f"{problem} ({type(err).__name__}: {str(err)[:80]})") from err
    if not isinstance(metrics, dict) or len(metrics) > MAX_METRICS or not all(
            len(k) <= MAX_METRIC_NAME and isinstance(v, float) and math.isfinite(v)
            for k, v in metrics.items()):
        raise CorruptStateError(problem)
    return metrics


def _no_constant(name: str) -> float:
    raise ValueError(f"{name} is not a finite number")


def _round_metrics(updates: list[Update] | Any) -> dict[str, Any]:
    """Sample-weighted mean of each metric the clients reported, plus participation."""
    total = sum(u.num_samples for u in updates)
    keys = sorted({k for u in updates for k in u.metrics})
    out: dict[str, Any] = {"participants": len(updates), "samples": total}
    for key in keys:
        rows = [(u.metrics[key], u.num_samples) for u in updates if key in u.metrics]
        weight = sum(n for _, n in rows)
        if weight > 0:
            out[key] = sum(v * n for v, n in rows) / weight
    return out
