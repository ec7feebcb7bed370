"""Engine and sessions: SQLite in WAL mode by default, any SQLAlchemy URL (PostgreSQL) for scale."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event, inspect
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from pflkit.server.orm import Base


def make_engine(url: str) -> Engine:
    """Create an engine; SQLite gets WAL, full fsync on commit, a generous busy timeout."""
    if url.startswith("sqlite"):
        database = sqlite_file(url)
        if database is not None:
            _private_sqlite_file(database)
        engine = create_engine(url, connect_args={"timeout": 60, "check_same_thread": False},
                               json_serializer=finite_json)

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
    return create_engine(url, pool_pre_ping=True, json_serializer=finite_json)


def finite_json(value: Any) -> str:
    """A JSON column's text, every float in it finite: NaN and infinities are stored as null.

    Python writes them as ``NaN``/``Infinity``, which PostgreSQL refuses: a round whose metric
    mean overflowed (two devices reporting 1e308 for 1000 samples) failed to close every tick,
    for ever. SQLite stored them, and the API showed null.
    """
    return json.dumps(_finite(value), allow_nan=False)


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def sqlite_file(url: str) -> Path | None:
    """The file of a SQLite URL (None: another database, or SQLite in memory)."""
    database = url.split("///", 1)[-1] if url.startswith("sqlite") else ""
    return Path(database) if database and database != ":memory:" else None


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


def table_names(engine: Engine) -> set[str]:
    """The tables of this schema the database holds."""
    return set(inspect(engine).get_table_names()) & set(Base.metadata.tables)


def drop_tables(engine: Engine) -> None:
    """Drop this schema's tables (those a refused first start created)."""
    Base.metadata.drop_all(engine)


def shown_url(url: str) -> str:
    """A database URL as an error may show it: without its password."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:  # not a URL at all: nothing in it can be told from a password
        return "(not a SQLAlchemy URL)"


def driver_message(err: SQLAlchemyError) -> str:
    """The database driver's message on one line (SQLAlchemy's adds the statement, a link)."""
    orig = getattr(err, "orig", None)
    return " ".join(str(orig if orig is not None else err).split())
