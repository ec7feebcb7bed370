"""A start that pfl-server refuses leaves the operator's folders and database as they were.

Before: a run config with ``data.root`` on a server started without ``--dataset-dir`` exited 2
with its one line, having created the data folder, the blob folder and an empty database (and,
on PostgreSQL, the tables): the refusal was found only when the first run was being built.
"""

import socket

from server_harness import run_toml
from sqlalchemy import create_engine, inspect
from test_operations import serve_once

REFUSAL = ("pfl-server: run config: data.root: this server reads no dataset files: set the "
           "server's dataset_dir (--dataset-dir, PFL_SERVER_DATASET_DIR)")

ROOTED = ("--set", 'data.root="x"')  # a run config with a data root


def kept_files(folder) -> list:
    """The files of a data folder, without SQLite's journals (its last close removes them)."""
    return sorted(p for p in folder.rglob("*") if not p.name.endswith(("-wal", "-shm")))


def test_a_refused_start_creates_no_folder_and_no_database(tmp_path):
    done = serve_once(tmp_path, *ROOTED, "--data-dir", str(tmp_path / "srv" / "data"))
    assert (done.returncode, done.stderr.strip()) == (2, REFUSAL)
    assert not (tmp_path / "srv").exists()  # not even the parent folder it would have made


def test_a_refused_start_keeps_a_folder_that_was_there_and_removes_what_it_made(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "notes.txt").write_text("the operator's own file")
    done = serve_once(tmp_path, *ROOTED, "--data-dir", str(data))
    assert (done.returncode, done.stderr.strip()) == (2, REFUSAL)
    assert sorted(p.name for p in data.iterdir()) == ["notes.txt"]


def test_a_refused_start_on_postgresql_leaves_the_database_empty(tmp_path, postgres_url):
    done = serve_once(tmp_path, *ROOTED, "--data-dir", str(tmp_path / "data"),
                      "--database-url", postgres_url)
    assert (done.returncode, done.stderr.strip()) == (2, REFUSAL)
    assert not (tmp_path / "data").exists()
    engine = create_engine(postgres_url)
    try:
        assert inspect(engine).get_table_names() == []
    finally:
        engine.dispose()


def test_a_refused_restart_keeps_the_run_it_found(tmp_path, make_server):
    """A restart refused after the database was opened (a blob folder that is a file)."""
    server = make_server(run_toml(rounds=3))
    run = server.status()["id"]
    server.stop()
    before = kept_files(server.data_dir)
    (tmp_path / "blocker").write_text("a file where the blob folder should be")
    (tmp_path / "server.toml").write_text(f'blob_dir = "{tmp_path / "blocker" / "blobs"}"\n')
    done = serve_once(tmp_path, "--data-dir", str(server.data_dir), "--config",
                      str(tmp_path / "server.toml"))
    assert (done.returncode, done.stderr.strip()) == (
        2, f"pfl-server: {tmp_path / 'blocker' / 'blobs'}: Not a directory")
    assert kept_files(server.data_dir) == before
    server.start()
    assert server.status()["id"] == run


def test_a_port_in_use_or_unusable_tls_files_are_refused_before_anything_is_made(tmp_path):
    """Before: uvicorn found out after the run was made: its own line and exit 3 for a port
    in use, a 60-line traceback and exit 1 for a TLS file missing or not PEM."""
    (tmp_path / "garbage.pem").write_text("not a certificate\n")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        cases = [
            (["--port", str(port)],
             f"--host 127.0.0.1 --port {port}: cannot listen there (address already in use)"),
            (["--tls-certfile", str(tmp_path / "c.pem"), "--tls-keyfile", str(tmp_path / "k.pem")],
             f"--tls-certfile {tmp_path / 'c.pem'}, --tls-keyfile {tmp_path / 'k.pem'}: not a "
             "certificate and its key (No such file or directory)"),
            (["--tls-certfile", str(tmp_path / "garbage.pem"), "--tls-keyfile",
              str(tmp_path / "garbage.pem")],
             f"--tls-certfile {tmp_path / 'garbage.pem'}, --tls-keyfile "
             f"{tmp_path / 'garbage.pem'}: not a certificate and its key ([SSL] PEM lib"),
        ]
        for flags, message in cases:
            done = serve_once(tmp_path, "--data-dir", str(tmp_path / "data"), *flags)
            assert done.returncode == 2, done.stderr
            assert done.stderr.startswith(f"pfl-server: {message}"), done.stderr
            assert len(done.stderr.splitlines()) == 1, done.stderr
            assert not (tmp_path / "data").exists()
