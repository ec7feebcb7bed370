"""The tests wait on events, not on seconds (tests/waiting.py): no literal time limit decides
an outcome. A loaded 2-core machine took 59 min for ``make test`` and failed a correct run at a
30 s ``communicate`` limit. At 732c528 this scan found 68 literal limits and sleeps (2 s to
600 s; one 0.5 s sleep stood for an event: "let them all queue behind the first commit")."""

from __future__ import annotations

import re
from pathlib import Path

TESTS = Path(__file__).parent
JAVA_TESTS = TESTS.parent / "android-demo" / "core" / "src" / "test"
# a number where a time limit goes: timeout=30, .wait(60), .join(10), max_elapsed=240,
# "--give-up-after", "240", monotonic() + 240, toNanos(240), and any sleep
LIMIT = re.compile(r"""(\btimeout=|timeout:\ float\ =\ |\.(wait|join|result)\(|max_elapsed=
                       |give-up-after",\ "|monotonic\(\)\ \+\ |to(Nanos|Millis)\()[\d.]+\b(?!\ \*)
                       |time\.sleep\(|Thread\.sleep\(""", re.VERBOSE)
# a number that decides nothing says why on its line: a retried attempt, a cleanup, a lower
# bound, the interval of a poll bounded by GUARD, a fake clock, a hostile server's pace
REASON = re.compile(r"(#|//) (retried|cleanup|at least|poll|fake clock|pace)")


def literal_limits() -> list[str]:
    found = []
    sources = [*TESTS.rglob("*.py"), *JAVA_TESTS.rglob("*.java")]
    for path in sources:
        if path.name in ("waiting.py", Path(__file__).name):
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if LIMIT.search(line) and not REASON.search(line):
                found.append(f"{path.relative_to(TESTS.parent)}:{number}: {line.strip()}")
    return found


def test_no_test_waits_a_literal_number_of_seconds():
    """Wait with tests/waiting.py (GUARD, wait_until) or PflServer.GUARD_SECONDS."""
    assert literal_limits() == []
