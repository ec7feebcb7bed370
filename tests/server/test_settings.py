"""Server settings: flags > environment > config file > defaults; no placeholder secrets."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from pflkit.server.settings import ServerSettings


def test_flags_beat_environment_beat_the_config_file(tmp_path, monkeypatch):
    config = tmp_path / "server.toml"
    config.write_text('admin_token = "from-the-file-0123456789"\nport = 1111\n'
                      'round_deadline = 5\nworkers = 3\n')
    monkeypatch.setenv("PFL_SERVER_PORT", "2222")
    monkeypatch.setenv("PFL_SERVER_WORKERS", "2")
    settings = ServerSettings.load(config, workers=4)
    assert (settings.port, settings.workers, settings.round_deadline) == (2222, 4, 5.0)
    assert settings.admin_token.get_secret_value() == "from-the-file-0123456789"
    assert "from-the-file" not in repr(settings)
    assert settings.db_url.startswith("sqlite:///") and settings.db_url.endswith("server.db")


def test_admin_token_is_required_and_tls_needs_both_files(monkeypatch, tmp_path):
    monkeypatch.delenv("PFL_SERVER_ADMIN_TOKEN", raising=False)
    with pytest.raises(ValidationError, match="admin_token"):
        ServerSettings.load()
    with pytest.raises(ValidationError, match="together"):
        ServerSettings.load(admin_token="t" * 16, tls_certfile=tmp_path / "cert.pem")
    with pytest.raises(FileNotFoundError):
        ServerSettings.load(tmp_path / "missing.toml")
