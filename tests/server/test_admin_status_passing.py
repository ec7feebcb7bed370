"""``pfl-admin status`` rides out a server that answers 503 for a while (admin_cli.py).

A server whose database is away (PostgreSQL restarting, refusing connections) answers every
request 503 with Retry-After: nothing is wrong with the operator's request, and the server
says to ask again. The live view ended there with ``pfl-admin: the server answered 503``,
as if the token had changed, although it rides out a server that does not answer at all.
"""

from __future__ import annotations

import subprocess

from server_harness import ADMIN, BIN, Server, run_toml
from waiting import GUARD, wait_until

REFRESH = '"GET /v1/runs/1 HTTP/1.1"'  # the view's refreshes of the run it shows


def test_the_live_view_keeps_asking_through_503s_until_the_database_is_back(
        postgres_cluster, tmp_path):
    name = postgres_cluster.create_database()
    server = Server(tmp_path / "server", run_toml(), ["--database-url", postgres_cluster.url(name),
                                                      "--log-level", "info"])  # access lines
    server.root.mkdir()
    log = server.root / "server.log"
    live = None
    try:
        server.start()
        live = subprocess.Popen([str(BIN / "pfl-admin"), "--url", server.url, "--token", ADMIN,
                                 "status", "--interval", "0.1"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        wait_until(lambda: f"{REFRESH} 200" in log.read_text(), "the view's first refresh")

        postgres_cluster._admin(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS false')
        postgres_cluster._admin("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                                f"WHERE datname = '{name}'")
        # the view asks again after a 503, and again: it is still there after two of them
        wait_until(lambda: live.poll() is not None or log.read_text().count(f"{REFRESH} 503") >= 2,
                   "a second 503 answer, or the view's end")
        assert live.poll() is None, live.communicate()

        postgres_cluster._admin(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true')
        text = log.read_text()
        wait_until(lambda: log.read_text().count(f"{REFRESH} 200") > text.count(f"{REFRESH} 200"),
                   "a refresh answered again")
        with server.admin() as http:  # the run ends: the view ends by itself, exit status 0
            http.post("/v1/runs/1/stop").raise_for_status()
        out, err = live.communicate(timeout=GUARD)
        assert live.returncode == 0, err
        assert err == "" and "run 1  stopped" in out
    finally:
        if live is not None and live.poll() is None:
            live.kill()
        server.stop()
        postgres_cluster.drop_database(name)
