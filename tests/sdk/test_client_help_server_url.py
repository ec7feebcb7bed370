"""``pfl-client --server`` must be an http(s) URL with a host, refused at once otherwise.

A first-time user's ``--server localhost:8000`` (no scheme) was retried for ``--give-up-after``
(600 s by default), one log line every few seconds, a URL that can never work.
"""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from pflkit.sdk.client_cli import app

runner = CliRunner()


@pytest.mark.parametrize("url, why", [
    ("localhost:8000", "must be http:// or https://"),
    ("127.0.0.1:8000", "must be http:// or https://"),
    ("ftp://fl.example.org", "must be http:// or https://"),
    ("http://", "must be http:// or https://"),
    ("http://127.0.0.1:65536", "is not a URL"),
    ("http://me:pw-123@127.0.0.1:8000", "holds a user name or password"),
])
def test_a_server_that_is_no_http_url_is_refused_before_anything_else(tmp_path, url, why):
    result = runner.invoke(app, ["--server", url, "--data", str(tmp_path)])
    assert result.exit_code == 2, result.output
    said = " ".join(result.output.replace("│", " ").split())  # click's panel wraps the line
    assert f"the server URL {why}" in said, result.output
    assert "pw-123" not in result.output  # a password is never echoed


@pytest.mark.parametrize("url", ["http://127.0.0.1:8000", "https://fl.example.org/",
                                 "http://[::1]:8000", "http://localhost"])
def test_an_http_url_is_taken(tmp_path, url):
    result = runner.invoke(app, ["--server", url, "--data", str(tmp_path)])
    assert result.exit_code == 1, result.output  # past the flags: no data in the folder
    assert f"no data.safetensors in {tmp_path}" in result.output
