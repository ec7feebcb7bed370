"""Engine and sessions: SQLite in WAL mode by default, any SQLAlchemy URL (PostgreSQL) for scale."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.orm import Session, sessionmaker

from pflkit.server.orm import Base


def make_engine(url: str) -> Engine:
    """Create an engine; SQLite gets WAL, full fsync on commit, a generous busy timeout."""
    if url.startswith("sqlite"):
        database = url.split("///", 1)[-1]
        if database and database != ":memory:":
            _private_sqlite_file(Path(database))
        engine = create_engine(url, connect_args={"timeout": 60, "check_same_thread": False})

        @event.listens_for(engine, "connect")
        def _pragmas(conn: Any, _record: Any) -> None:
            cursor = conn.cursor()
            # WAL persists in the file: switch only once, since switching takes an exclusive
            # lock that fails at once (no busy wait) while another worker is connected
            if cursor.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
                cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA synchronous=FULL")  # an acknowledged commit survives power loss
            cursor.execute("PRAGMA foreign_keys=ON")
            cursor.close()

        return engine
    return create_engine(url, pool_pre_ping=True)


def _private_sqlite_file(path: Path) -> None:
    """Create the database file 0600 before SQLite does (it would use the umask, 0644).

    SQLite gives its -wal and -shm files the database file's permissions.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o600))
    for sibling in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
        if sibling.exists():
            sibling.chmod(0o600)


def init_db(engine: Engine) -> sessionmaker[Session]:
    """Create missing tables; return the session factory."""
    Base.metadata.create_all(engine)
    return sessionmaker(engine, expire_on_commit=False)
