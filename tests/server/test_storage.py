"""The server's files are private to its user: data folder and blob store 0700 (each of its
folders too), the SQLite database (and its WAL) and every blob 0600; a blob write killed midway
leaves nothing once the server starts again. A real server process, a real round."""

from __future__ import annotations

import stat
import subprocess
import sys

from server_harness import run_toml

from pflkit.server.blobs import BlobStore

WRITER = """
import os, signal, sys
from pflkit.server.blobs import BlobStore

def stop(*args):  # between writing the temp file and renaming it
    print("written", flush=True)
    if sys.argv[2] == "die":
        os.kill(os.getpid(), signal.SIGKILL)
    sys.stdin.readline()  # a live writer, until the test kills it

os.replace = stop
BlobStore(sys.argv[1]).put(os.urandom(800_000))
"""


def mode(path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def stopped_writer(root, die: bool) -> subprocess.Popen:
    """A process writing a blob into ``root``, stopped (killed if ``die``) before the rename."""
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(root), "die" if die else "live"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert writer.stdout is not None and writer.stdout.readline() == "written\n"
    return writer


def temp_files(root) -> list:
    return [p for p in root.rglob(".*") if p.is_file()]


def test_database_and_blobs_are_private_to_the_server_user(make_server):
    server = make_server(run_toml("fedavg", rounds=1, num_clients=3, per_round=1),
                         "--min-enrolled", "1", start=False)
    root = server.data_dir / "blobs"
    stopped_writer(root, die=True).wait()  # an upload killed mid-write: ~0.8 MB left behind
    older = root / "ab"  # a folder an older version made 0755
    older.mkdir(mode=0o755)
    older.chmod(0o755)
    assert len(temp_files(root)) == 1
    server.start()
    server.enroll()
    server.wait_for(lambda s: s["current_round"] is not None)
    data = server.data_dir
    assert mode(data) == 0o700 and mode(root) == 0o700
    assert not temp_files(root)
    folders = [p for p in root.iterdir() if p.is_dir()]
    assert len(folders) >= 2 and all(mode(path) == 0o700 for path in folders)
    database = [data / "server.db", data / "server.db-wal"]
    assert all(mode(path) == 0o600 for path in database if path.exists())
    assert database[0].exists()
    blobs = [p for p in root.rglob("*") if p.is_file()]
    assert blobs and all(mode(path) == 0o600 for path in blobs)


def test_only_the_temp_files_of_dead_writers_are_deleted(tmp_path):
    """Workers and replicas may write while a server starts: a live writer's file stays."""
    root = tmp_path / "blobs"
    stopped_writer(root, die=True).wait()
    live = stopped_writer(root, die=False)
    try:
        assert len(temp_files(root)) == 2
        store = BlobStore(root)
        assert store.remove_partial_writes() == 1 and len(temp_files(root)) == 1
    finally:
        live.kill()
        live.wait()
    assert store.remove_partial_writes() == 1 and not temp_files(root)
    assert all(mode(path) == 0o700 for path in root.iterdir())
