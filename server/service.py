"""The federation service: the server's parts, each one concern, over one shared Store.

Transport-free (routers in ``server/api`` translate :class:`~pflkit.server.errors.ServiceError`
into HTTP statuses). The database is the source of truth, so any number of worker processes
(and replicas) can serve one run:

* ``runs`` -- create, pause, resume, stop, progress (``runs.py``);
* ``enrollment`` -- tokens, client secrets, revocation (``enrollment.py``);
* ``tasks`` -- what a client should do, global-state downloads, algorithm queries
  (``tasks.py``);
* ``uploads`` -- admit, validate, store durably, acknowledge (``uploads.py``);
* ``secagg`` -- secure aggregation's messages (``secagg_rounds.py``);
* ``retention`` -- delete the blobs no round can need again (``retention.py``);
* ``rounds`` -- open and close rounds (``rounds.py``): the only part that aggregates tensors,
  built on first use, so a process that never keeps rounds never imports PyTorch.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING

from pflkit.server.blobs import BlobStore, private_dir
from pflkit.server.db import init_db, make_engine
from pflkit.server.enrollment import Enrollment
from pflkit.server.retention import Retention
from pflkit.server.runs import Runs
from pflkit.server.secagg_rounds import SecAggRounds
from pflkit.server.settings import ServerSettings
from pflkit.server.store import Store
from pflkit.server.tasks import Tasks
from pflkit.server.uploads import Uploads

if TYPE_CHECKING:
    from pflkit.server.rounds import RoundKeeper


@dataclass
class FederationService:
    """Every part of the service, sharing one store."""

    store: Store
    runs: Runs = field(init=False)
    enrollment: Enrollment = field(init=False)
    tasks: Tasks = field(init=False)
    uploads: Uploads = field(init=False)
    secagg: SecAggRounds = field(init=False)
    retention: Retention = field(init=False)
    on_quorum: Callable[[], None] = lambda: None  # when accepted uploads may close a round

    def __post_init__(self) -> None:
        self.runs = Runs(self.store)
        self.enrollment = Enrollment(self.store)
        self.tasks = Tasks(self.store)
        self.uploads = Uploads(self.store, self.on_quorum)
        self.secagg = SecAggRounds(self.store, self.on_quorum)
        self.retention = Retention(self.store)

    @property
    def settings(self) -> ServerSettings:
        """The server settings."""
        return self.store.settings

    @cached_property
    def rounds(self) -> RoundKeeper:
        """The round keeper (imports PyTorch on first use)."""
        from pflkit.server.rounds import RoundKeeper

        return RoundKeeper(self.store)


def build_service(settings: ServerSettings,
                  on_quorum: Callable[[], None] = lambda: None) -> FederationService:
    """Database, blob store and service for these settings (tables created if missing)."""
    private_dir(settings.data_dir)
    sessions = init_db(make_engine(settings.db_url))
    return FederationService(Store(settings, sessions, BlobStore(settings.blobs)), on_quorum)
