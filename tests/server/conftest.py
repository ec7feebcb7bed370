"""Fixtures of the server tests; helpers live in server_harness.py (imported by path).

PostgreSQL (``PostgresCluster``): a throwaway server, initdb in a temp folder, unix socket only.
One cluster per test process (so one per pytest-xdist worker, each with its own folder and
port), started on first use and stopped at the end of the session; every test that asks gets
a fresh empty database, dropped afterwards. As root (CI) the server runs as the ``postgres``
OS user, since PostgreSQL refuses to run as root. Durability settings are off (``fsync``,
``synchronous_commit``): the tests kill pfl-server processes, never the database server.
"""

from __future__ import annotations

import os
import pwd
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from api_harness import LIMIT, MAX_SAMPLES  # noqa: E402
from server_harness import Server, run_toml  # noqa: E402
from waiting import GUARD  # noqa: E402

BINDIR_ENV = "PFLKIT_PG_BINDIR"  # folder holding initdb and pg_ctl (default: found below)
SKIP_ENV = "PFLKIT_SKIP_POSTGRES"  # "1": skip the PostgreSQL tests instead of failing
MISSING = ("PostgreSQL server binaries (initdb, pg_ctl) not found: run `make setup` (it "
           f"apt-installs the `postgresql` package), set {BINDIR_ENV} to their folder, or "
           f"set {SKIP_ENV}=1 to skip the PostgreSQL tests")


def find_bindir() -> Path | None:
    """The folder with initdb and pg_ctl: $PFLKIT_PG_BINDIR, Debian's newest, or PATH."""
    candidates = [Path(os.environ[BINDIR_ENV])] if os.environ.get(BINDIR_ENV) else []
    debian = [p for p in Path("/usr/lib/postgresql").glob("*/bin") if p.parent.name.isdigit()]
    candidates += sorted(debian, key=lambda p: int(p.parent.name), reverse=True)
    on_path = shutil.which("pg_ctl")
    if on_path:
        candidates.append(Path(on_path).parent)
    for folder in candidates:
        if (folder / "initdb").is_file() and (folder / "pg_ctl").is_file():
            return folder
    return None


def _free_port() -> int:
    """A port no TCP listener uses (the socket file and shared-memory key derive from it)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class PostgresCluster:
    """One PostgreSQL server listening only on a unix socket in its own temp folder."""

    user = "postgres"  # the superuser initdb creates; trust authentication

    def __init__(self, bindir: Path) -> None:
        self.bindir = bindir
        self.as_root = os.geteuid() == 0
        # /tmp, not pytest's tmp_path: the postgres user must reach it, and a socket path
        # must stay under ~100 bytes
        self.root = Path(tempfile.mkdtemp(prefix="pflkit-pg-", dir="/tmp"))
        self.data = self.root / "data"
        self.socket_dir = self.root / "sock"
        self.port = _free_port()
        self.started = False

    def _run(self, *args: str) -> None:
        """Run a PostgreSQL program (as the postgres OS user when we are root)."""
        command = [str(self.bindir / args[0]), *args[1:]]
        if self.as_root:
            command = ["runuser", "-u", "postgres", "--", *command]
        done = subprocess.run(command, cwd=self.root, capture_output=True, text=True,
                              timeout=GUARD)
        if done.returncode != 0:
            log = self.root / "server.log"
            raise RuntimeError(f"{' '.join(command)} failed ({done.returncode}):\n"
                               f"{done.stdout}{done.stderr}"
                               f"{log.read_text() if log.is_file() else ''}")

    def start(self) -> None:
        """Create the cluster and start its server (returns once it accepts connections)."""
        self.socket_dir.mkdir()
        if self.as_root:
            try:
                owner = pwd.getpwnam("postgres")
            except KeyError as err:
                raise RuntimeError("running as root, PostgreSQL needs a `postgres` OS user "
                                   "(the `postgresql` package creates it)") from err
            for path in (self.root, self.socket_dir):
                os.chown(path, owner.pw_uid, owner.pw_gid)
        self._run("initdb", "-D", str(self.data), "-A", "trust", "-U", self.user, "-E", "UTF8",
                  "--no-locale", "--no-sync")
        options = (f"-c listen_addresses='' -k {shlex.quote(str(self.socket_dir))} "
                   f"-p {self.port} -c fsync=off -c synchronous_commit=off "
                   "-c full_page_writes=off -c max_connections=200")
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.root / "server.log"), "-w",
                  "-t", str(int(GUARD)), "-o", options, "start")
        self.started = True

    def stop(self) -> None:
        """Stop the server (immediately: nothing in it is kept) and delete its folder."""
        try:
            if self.started:
                self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)

    def url(self, database: str) -> str:
        """The SQLAlchemy URL of a database of this cluster (psycopg 3 driver)."""
        return (f"postgresql+psycopg://{self.user}@/{database}"
                f"?host={self.socket_dir}&port={self.port}")

    def _admin(self, sql: str) -> None:
        import psycopg

        with psycopg.connect(host=str(self.socket_dir), port=self.port, user=self.user,
                             dbname="postgres", autocommit=True) as conn:
            conn.execute(sql)  # type: ignore[arg-type]

    def create_database(self) -> str:
        """Create an empty database with a unique name; return its name."""
        name = f"pfl_{uuid.uuid4().hex[:16]}"
        self._admin(f'CREATE DATABASE "{name}"')
        return name

    def drop_database(self, name: str) -> None:
        """Drop a database, ending the sessions still connected to it."""
        self._admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


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


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def api(request, tmp_path_factory):
    """One server per API test module (test_api*.py): on a SQLite file, then on PostgreSQL."""
    root = tmp_path_factory.mktemp("api")
    database, cluster = [], None
    if request.param == "postgresql":
        cluster = request.getfixturevalue("postgres_cluster")
        name = cluster.create_database()
        database = ["--database-url", cluster.url(name)]
    server = Server(root / "server", run_toml("fedavg", rounds=50),
                    ["--min-enrolled", "3", "--min-clients", "1", "--max-upload-bytes",
                     str(LIMIT), "--max-num-samples", str(MAX_SAMPLES),
                     "--auth-failure-limit", "100000", "--api-docs", *database])  # fuzzed
    server.root.mkdir()
    server.start()
    secrets = {cid: server.enroll(cid)[1] for cid in range(3)}
    yield server, secrets
    server.stop()
    if cluster is not None:
        cluster.drop_database(name)
