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

import logging
import os
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy.exc import SQLAlchemyError

from pflkit.server.blobs import BlobStore, private_dir
from pflkit.server.db import drop_tables, init_db, make_engine, sqlite_file, table_names
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


def first_missing(path: Path) -> Path | None:
    """The outermost folder (or the file) of ``path`` that does not exist yet (None: it does)."""
    path = Path(path).absolute()
    if os.path.lexists(path):
        return None
    while not os.path.lexists(path.parent):
        path = path.parent
    return path


@contextmanager
def undone_if_refused(settings: ServerSettings) -> Iterator[None]:
    """A start refused while preparing (a run config the rules refuse) leaves nothing behind.

    What ``build_service`` and the first run would create -- the data and blob folders, the
    SQLite file, the tables of a database that had none -- is removed when the block raises;
    whatever existed before is left as it was.
    """
    paths = (settings.data_dir, settings.blobs, sqlite_file(settings.db_url))
    made = {missing for path in paths if path and (missing := first_missing(path))}
    engine = None if settings.db_url.startswith("sqlite") else make_engine(settings.db_url)
    fresh = engine if engine is not None and not table_names(engine) else None
    try:
        yield
    except Exception:
        for path in made:
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            else:  # the SQLite file: its journals too
                for name in ("", "-wal", "-shm", "-journal"):
                    with suppress(OSError):  # not made after all (a file in the way)
                        path.with_name(path.name + name).unlink(missing_ok=True)
        if fresh is not None:
            try:
                drop_tables(fresh)
            except SQLAlchemyError:  # the refusal is the error to show, not this
                logging.getLogger(__name__).exception("dropping the tables made failed")
        raise
    finally:
        if engine is not None:
            engine.dispose()
