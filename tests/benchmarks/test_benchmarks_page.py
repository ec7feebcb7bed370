"""docs/benchmarks.md is what `make bench-report` writes from benchmarks/results/.

The page says "Regenerate this page with `make bench-report`" and that each section names the
exact command of its numbers. Both hold only while nobody edits the page by hand: such an edit
disagrees with the result file beside the numbers and is lost at the next regeneration. A
correction goes into the results file (and the script that writes it), then `make bench-report`.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import collect  # noqa: E402

PAGE = ROOT / "docs" / "benchmarks.md"


def test_the_page_is_what_bench_report_writes(tmp_path, monkeypatch):
    regenerated = tmp_path / "benchmarks.md"
    monkeypatch.setattr(collect, "DOC", regenerated)  # write beside, never over, the page
    collect.main()
    assert PAGE.read_text() == regenerated.read_text(), (
        "docs/benchmarks.md differs from `make bench-report`'s output: edit the results file "
        "in benchmarks/results/, then run `make bench-report`")


def test_every_section_names_its_command():
    sections = re.split(r"^## ", PAGE.read_text(), flags=re.MULTILINE)[1:]
    assert len(sections) >= 20
    unnamed = [s.splitlines()[0] for s in sections if "Command" not in s]
    assert unnamed == []


def test_every_inline_command_is_shell_that_parses():
    """A reader pastes them: `... bench_x.py  (make bench-x)` inside the backticks did not."""
    commands = re.findall(r"Command[^`\n]*?: `([^`]+)`", PAGE.read_text())
    assert len(commands) >= 10
    broken = [c for c in commands
              if subprocess.run(["bash", "-n", "-c", c], capture_output=True).returncode]
    assert broken == []
