"""Every console script answers a usage error in one line with exit 2 (sdk/console.py)."""

import subprocess
import sys
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent
SCRIPTS = ("pfl-sim", "pfl-server", "pfl-client", "pfl-export", "pfl-fedrod-head", "pfl-admin")


@pytest.mark.parametrize("script", SCRIPTS)
def test_an_unknown_option_is_one_line_exit_2(script):
    done = subprocess.run([BIN / script, "--no-such-option"], capture_output=True, text=True,
                          check=False)
    assert done.returncode == 2
    assert done.stderr.splitlines() == [done.stderr.strip()]
    assert done.stderr.startswith(f"{script}: No such option: --no-such-option")
    assert f"(see '{script} --help')" in done.stderr


def test_a_bad_option_value_names_the_option_in_one_line(tmp_path):
    done = subprocess.run([BIN / "pfl-client", "--server", "http://127.0.0.1:9", "--data",
                           str(tmp_path), "--log-level", "loud"],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        "pfl-client: Invalid value for '--log-level': 'loud' is not one of debug, info, "
        "warning, error (see 'pfl-client --help')"]


def test_help_still_shows_the_usage():
    done = subprocess.run([BIN / "pfl-sim", "--help"], capture_output=True, text=True,
                          check=False)
    assert done.returncode == 0 and "Usage: pfl-sim" in done.stdout


def test_a_malformed_allow_imports_entry_is_a_usage_error_before_the_data_is_read(tmp_path):
    done = subprocess.run([BIN / "pfl-client", "--server", "http://127.0.0.1:9", "--data",
                           str(tmp_path / "no-data"), "--allow-imports", "my app"],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 2  # was exit 1, after 'no data.safetensors'
    assert done.stderr.splitlines() == [
        "pfl-client: Invalid value for '--allow-imports': 'my app' is neither a package name "
        "nor an import path 'package.module:attr' (see 'pfl-client --help')"]
