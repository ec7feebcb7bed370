"""Every `make bench-*` script still loads against today's API.

The benchmarks run for minutes to hours, so `make test` never runs most of them; their module
level (settings, method tables, imports) is what breaks first when an API they use changes:
bench_export.py built its selections as ``Choice(lam=0.3)`` for a day after ``Choice`` became
``Choice({name: value})``, so `make bench-export` could not start and its published numbers
could not be regenerated.
"""

from __future__ import annotations

import importlib
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCHMARKS = ROOT / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))


def make_bench_scripts() -> list[str]:
    """The scripts the Makefile's bench-* targets run (``python bench_x.py`` lines)."""
    makefile = (ROOT / "Makefile").read_text()
    return sorted(set(re.findall(r"python (bench_\w+)\.py", makefile)))


def test_the_makefile_names_bench_scripts_that_exist():
    scripts = make_bench_scripts()
    assert len(scripts) >= 15
    assert [s for s in scripts if not (BENCHMARKS / f"{s}.py").is_file()] == []


@pytest.mark.parametrize("script", make_bench_scripts())
def test_bench_script_loads(script):
    importlib.import_module(script)
