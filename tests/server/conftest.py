"""Fixtures of the server tests; helpers live in server_harness.py (imported by path)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from postgres_cluster import MISSING, SKIP_ENV, PostgresCluster, find_bindir  # noqa: E402
from server_harness import Server  # noqa: E402


@pytest.fixture
def make_server(tmp_path):
    servers: list[Server] = []

    def make(config: str, *flags: str, start: bool = True) -> Server:
        server = Server(tmp_path / f"server{len(servers)}", config, list(flags))
        server.root.mkdir()
        servers.append(server)
        if start:
            server.start()
        return server

    yield make
    for server in servers:
        server.stop()


@pytest.fixture(scope="session")
def postgres_cluster():
    """A real PostgreSQL server for this test process (one per xdist worker), started once."""
    if os.environ.get(SKIP_ENV) == "1":
        pytest.skip(f"{SKIP_ENV}=1: PostgreSQL tests skipped")
    try:
        import psycopg  # noqa: F401
    except ImportError:
        pytest.fail("psycopg is not installed: run `make setup` (pflkit's `postgres` extra), "
                    f"or set {SKIP_ENV}=1 to skip the PostgreSQL tests", pytrace=False)
    bindir = find_bindir()
    if bindir is None:
        pytest.fail(MISSING, pytrace=False)
    cluster = PostgresCluster(bindir)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def postgres_url(postgres_cluster):
    """The SQLAlchemy URL of a fresh, empty database (dropped after the test)."""
    name = postgres_cluster.create_database()
    yield postgres_cluster.url(name)
    postgres_cluster.drop_database(name)


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request) -> str | None:
    """Each backend in turn: None (SQLite file in the data folder) or a PostgreSQL URL.

    Request it before ``make_server``: fixtures stop in reverse order, so the servers stop
    before their database is dropped.
    """
    if request.param == "sqlite":
        return None
    return request.getfixturevalue("postgres_url")
