"""Repository conventions that no single module's tests can see."""
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MAX_LINES = 300  # issue 23's bar: a module a reader can hold in mind
CHECKED_FOLDERS = ("sdk/", "server/", "export/", "benchmarks/", "tests/")


def _tracked_python_files() -> list[Path]:
    try:
        listed = subprocess.run(
            ["git", "-C", str(ROOT), "ls-files", "-z", "--", "*.py"],
            capture_output=True, check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout: the tracked files are unknown")
    names = [n for n in listed.decode().split("\0") if n.startswith(CHECKED_FOLDERS)]
    # a file deleted in the work tree but not yet in the index is no longer a module
    return [ROOT / n for n in names if (ROOT / n).is_file()]


def test_no_module_is_over_300_lines():
    files = _tracked_python_files()
    assert files, "git lists no Python files under " + ", ".join(CHECKED_FOLDERS)
    lengths = {p.relative_to(ROOT).as_posix(): len(p.read_text().splitlines()) for p in files}
    too_long = {name: n for name, n in sorted(lengths.items()) if n > MAX_LINES}
    assert not too_long, f"split these modules by concept (at most {MAX_LINES} lines): {too_long}"
