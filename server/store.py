"""What every part of the service shares: settings, database transactions, blobs, caches.

The caches hold what does not change once written: run terms (:class:`RunTerms`, read from
the database), run setups (config -> algorithm, built with PyTorch only where a process needs
them: the round keeper, run creation, algorithm queries), each for the ``RUNS_CACHED`` runs
used most recently, and the newest two global states (bytes for downloads, tensors for the
keeper).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from pflkit.sdk.config_types import stored_settings
from pflkit.server.blobs import BlobStore
from pflkit.server.errors import NotFound
from pflkit.server.orm import Client, Round, Run, RunTermsRow
from pflkit.server.settings import ServerSettings

if TYPE_CHECKING:
    from pflkit.sdk.algorithms.base import State
    from pflkit.server.runs import RunSetup

K = TypeVar("K")
T = TypeVar("T")
RUNS_CACHED = 4  # runs whose terms and setup a process keeps (the newest used ones)


class Recent(Generic[K, T]):
    """A thread-safe cache of the ``size`` values used most recently, by key.

    Every sampled client downloads the same global state at the start of a round, so one
    shared copy serves them all (the previous round's stays for stragglers); a server that
    serves run after run for months keeps the terms and setups of its newest runs only, not
    of every run it ever had (an evicted one is loaded again when asked for).
    """

    def __init__(self, size: int, load: Callable[[K], T] | None = None) -> None:
        self.size = size
        self._load = load
        self._values: OrderedDict[K, T] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._values)

    def get(self, key: K, load: Callable[[K], T] | None = None) -> T:
        """The value of ``key``, loaded (by ``load``, else the cache's loader) on first use."""
        with self._lock:
            if key in self._values:
                self._values.move_to_end(key)
                return self._values[key]
        loader = load or self._load
        assert loader is not None, "a Recent without a loader needs one per call"
        value = loader(key)
        with self._lock:
            self._values[key] = value
            self._values.move_to_end(key)
            while len(self._values) > self.size:
                self._values.popitem(last=False)
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
        self.global_bytes: Recent[str, bytes] = Recent(2, self._global_bytes)
        self.global_states: Recent[str, State] = Recent(2, self._load_state)
        self.run_terms: Recent[int, RunTerms] = Recent(RUNS_CACHED)
        self.run_setups: Recent[int, RunSetup] = Recent(RUNS_CACHED)

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
        return self.run_terms.get(run.id, lambda _: self._stored_terms(s, run))

    def _stored_terms(self, s: Session, run: Run) -> RunTerms:
        row = s.get(RunTermsRow, run.id)
        terms = RunTerms.from_json(row.terms) if row is not None else None
        if terms is None:
            from pflkit.server.runs import terms_of  # needs PyTorch: only for such old runs

            terms = terms_of(self.setup(run), self.global_states.get(run.global_hash))
            s.merge(RunTermsRow(run_id=run.id, terms=terms.to_json()))
        return terms

    def setup(self, run: Run) -> RunSetup:
        """The run's config resolved to algorithm and schedule (built with PyTorch, cached)."""
        from pflkit.server.runs import RunRules, build_setup

        rules = RunRules.of(self.settings)

        def build(_: int) -> RunSetup:
            with stored_settings():  # a row a pflkit before a check wrote still loads
                return build_setup(run.config_toml, rules)

        return self.run_setups.get(run.id, build)

    def _global_bytes(self, digest: str) -> bytes:
        """A global state's bytes; NotFound once ``pfl-admin prune`` deleted it (retention.py).

        Not a 503 "retry later": a device asking again would wait for it forever.
        """
        try:
            return self.blobs.get(digest)
        except FileNotFoundError:
            raise NotFound(f"no global state {digest}") from None

    def _load_state(self, digest: str) -> State:
        from pflkit.sdk.tensorio import load_state

        return load_state(self.blobs.path(digest))
