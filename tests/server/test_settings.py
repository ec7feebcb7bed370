"""Server settings: flags > environment > config file > defaults; no placeholder secrets."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from pflkit.server.settings import ServerSettings, explain


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


@pytest.mark.parametrize("name,value,message", [
    # issue #21 item 2: `--round-deadline inf` and `--keep-alive-timeout inf` started a server
    ("round_deadline", "inf", "--round-deadline (or PFL_SERVER_ROUND_DEADLINE): must be in "
                              "(0, 604800], got inf"),
    ("round_deadline", "nan", "must be in (0, 604800], got nan"),
    ("keep_alive_timeout", "inf", "--keep-alive-timeout (or PFL_SERVER_KEEP_ALIVE_TIMEOUT): "
                                  "must be in (0, 3600], got inf"),
    # no flag: the config file's key (it named a --tick-seconds pfl-server does not have)
    ("tick_seconds", "0", "tick_seconds (the --config file's, or PFL_SERVER_TICK_SECONDS): "
                          "must be in (0, 60]"),
    ("auth_failure_window", "1e400", "must be in (0, 86400], got inf"),
    ("clip_norm", "nan", "--clip-norm (or PFL_SERVER_CLIP_NORM): must be in (0, 1e+06]"),
    ("trim_fraction", "0.5", "must be in [0, 0.5), got 0.5"),
    ("max_upload_bytes", str(2**40), "must be in [1024, 4294967296]"),
    ("min_enrolled", "0", "--min-enrolled (or PFL_SERVER_MIN_ENROLLED): must be in [1, 100000]"),
    ("workers", "1000", "must be in [1, 64], got 1000"),
])
def test_every_number_has_a_finite_bounded_range(monkeypatch, name, value, message):
    monkeypatch.setenv(f"PFL_SERVER_{name.upper()}", value)
    with pytest.raises(ValidationError) as err:
        ServerSettings.load(admin_token="t" * 16)
    text = explain(err.value)
    assert message in text and "\n" not in text, text


def test_an_unknown_setting_comes_with_the_closest_known_one(tmp_path):
    """Issue #21 item 11."""
    config = tmp_path / "server.toml"
    config.write_text("round_deadlin = 5\n")
    with pytest.raises(ValidationError) as err:
        ServerSettings.load(config, admin_token="t" * 16)
    assert explain(err.value) == ("unknown setting 'round_deadlin' in the --config file; did "
                                  "you mean 'round_deadline'?")


def test_pfl_admins_config_file_names_the_closest_key_too(tmp_path):
    """Issue #21 item 11: pfl-admin's config file is strict as well."""
    from pflkit.server.admin_settings import SettingsError, resolve

    config = tmp_path / "admin.toml"
    config.write_text('url = "http://127.0.0.1:1"\ntoken_flie = "admin.token"\n')
    with pytest.raises(SettingsError, match=r"unknown key 'token_flie' \(did you mean "
                                            r"'token_file'\?\)$"):
        resolve(config=config)
    config.write_text('colour = "blue"\n')
    with pytest.raises(SettingsError, match=r"unknown key 'colour' \(known: url, token, "
                                            r"token_file\)$"):
        resolve(config=config)
