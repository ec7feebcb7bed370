"""Fixtures of the server tests; helpers live in server_harness.py (imported by path)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

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

