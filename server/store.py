"""What every part of the service shares: settings, database transactions, blobs, caches.

The caches hold what does not change once written: run terms (:class:`RunTerms`, read from
the database), run setups (config -> algorithm, built with PyTorch only where a process needs
them: the round keeper, run creation, algorithm queries) and the newest two global states
(bytes for downloads, tensors for the keeper).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from pflkit.server.blobs import BlobStore
from pflkit.server.errors import NotFound
from pflkit.server.orm import Client, Round, Run, RunTermsRow
from pflkit.server.settings import ServerSettings

if TYPE_CHECKING:
    from pflkit.sdk.algorithms.base import State
    from pflkit.server.runs import RunSetup

T = TypeVar("T")


class NewestTwo(Generic[T]):
    """A thread-safe cache of the two most recently loaded values, by key.

    Every sampled client downloads the same global state at the start of a round, so one
    shared copy serves them all; the previous round's stays for stragglers.
    """

    def __init__(self, load: Callable[[str], T]) -> None:
        self._load = load
        self._values: dict[str, T] = {}
        self._lock = threading.Lock()

    def get(self, key: str) -> T:
        """The value of ``key``, loaded on first use."""
        with self._lock:
            if key in self._values:
                return self._values[key]
        value = self._load(key)
        with self._lock:
            if len(self._values) >= 2 and key not in self._values:
                self._values.pop(next(iter(self._values)))
            self._values[key] = value
        return value


@dataclass(frozen=True)
class RunTerms:
    """A run as HTTP workers see it: names, the clients' task config, the update schema.

    The task config (sdk/task_config.py, wire form) is the same for every round: it carries
    the learning-rate schedule, and each device computes its round's rate from it.
    """

    algorithm: str
    model: str
    task: dict[str, Any]  # TaskConfig.to_wire(): what every task's "config" is
    schema: dict[str, tuple[list[int], str]]  # update tensor -> (shape, safetensors dtype)
    device_clip_norm: float | None = None  # DP's C when devices clip (dp_clip_on_device)
    secagg: dict[str, Any] | None = None  # [aggregation]'s secagg_* settings (secure aggregation)

    def to_json(self) -> dict[str, Any]:
        """The stored form."""
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RunTerms | None:
        """Read the stored form; None for an older version's (a per-round "lrs" list)."""
        if "lrs" in data:
            return None
        schema = {k: (list(shape), dtype) for k, (shape, dtype) in data["schema"].items()}
        return cls(data["algorithm"], data["model"], data["task"], schema,
                   data.get("device_clip_norm"), data.get("secagg"))


class Store:
    """Settings, sessions, blobs and the caches of one process."""

    def __init__(self, settings: ServerSettings, sessions: sessionmaker[Session],
                 blobs: BlobStore) -> None:
        self.settings = settings
        self.sessions = sessions
        self.blobs = blobs
        self.global_bytes: NewestTwo[bytes] = NewestTwo(blobs.get)
        self.global_states: NewestTwo[State] = NewestTwo(self._load_state)
        self._terms: dict[int, RunTerms] = {}
        self._setups: dict[int, RunSetup] = {}
        self._lock = threading.Lock()

    @contextmanager
    def transaction(self) -> Iterator[Session]:
        """A session in a transaction, committed on success, rolled back on error."""
        with self.sessions() as session, session.begin():
            yield session

    @staticmethod
    def current_run(s: Session) -> Run | None:
        """The newest run."""
        return s.scalar(select(Run).order_by(Run.id.desc()).limit(1))

    def get_run(self, s: Session, run_id: int | None) -> Run:
        """A run by id, or the newest one (None); NotFound if there is none."""
        run = self.current_run(s) if run_id is None else s.get(Run, run_id)
        if run is None:
            raise NotFound("no such run" if run_id is not None else "no run has been created")
        return run

    @staticmethod
    def round_of(s: Session, run: Run, index: int) -> Round | None:
        """A round of a run by index."""
        return s.scalar(select(Round).where(Round.run_id == run.id, Round.index == index))

    def quorum(self, s: Session, rnd: Round) -> int:
        """How many accepted updates close an open round.

        ``min_clients`` (default: every sampled client), but no more than the sampled clients
        that are not revoked.
        """
        revoked = set(s.scalars(select(Client.id).where(Client.revoked_at.isnot(None))))
        reachable = len(set(rnd.sampled) - revoked)
        return min(self.settings.min_clients or len(rnd.sampled), reachable)

    def terms(self, s: Session, run: Run) -> RunTerms:
        """The run's terms (cached; an older version's run gets its terms computed again)."""
        with self._lock:
            if run.id in self._terms:
                return self._terms[run.id]
        row = s.get(RunTermsRow, run.id)
        terms = RunTerms.from_json(row.terms) if row is not None else None
        if terms is None:
            from pflkit.server.runs import terms_of  # needs PyTorch: only for such old runs

            terms = terms_of(self.setup(run), self.global_states.get(run.global_hash))
            s.merge(RunTermsRow(run_id=run.id, terms=terms.to_json()))
        with self._lock:
            self._terms[run.id] = terms
        return terms

    def setup(self, run: Run) -> RunSetup:
        """The run's config resolved to algorithm and schedule (built with PyTorch, cached)."""
        with self._lock:
            if run.id in self._setups:
                return self._setups[run.id]
        from pflkit.server.runs import RunRules, build_setup

        setup = build_setup(run.config_toml, RunRules.of(self.settings))
        with self._lock:
            self._setups[run.id] = setup
        return setup

    def _load_state(self, digest: str) -> State:
        from pflkit.sdk.tensorio import state_from_bytes

        return state_from_bytes(self.blobs.get(digest), f"blob {digest}")
