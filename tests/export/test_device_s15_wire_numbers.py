"""The rule both device clients read a server's numbers by, as the shared vectors state it.

android-demo/tools/wire_numbers.py records the Python client's verdict on one number in one
field of a server's answer; the Java client's WireNumbersTest is held to those vectors. This
pins the rule itself on the Python side: an integer field takes a JSON integer in its range
only (``1.0``, ``1e0``, booleans, NaN, 2^53 + 1 and 2^63 refused), a number field any JSON
number in its range.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

TOOL = Path(__file__).resolve().parents[2] / "android-demo/tools/wire_numbers.py"


def verdicts() -> dict[tuple[str, str], object]:
    """(field, number as written) -> the value read, or "refused"."""
    spec = importlib.util.spec_from_file_location("wire_numbers", TOOL)
    assert spec is not None and spec.loader is not None
    tool = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = tool
    spec.loader.exec_module(tool)
    out: dict[tuple[str, str], object] = {}
    vectors = iter(tool.vectors())
    for field in tool.FIELDS:
        for number in tool.NUMBERS:
            vector = next(vectors)
            assert vector["field"] == field
            out[field, number] = vector["value"] if vector["accepted"] else "refused"
    return out


def test_integers_are_json_integers_in_range_and_numbers_any_number_in_range() -> None:
    got = verdicts()
    integers = ("task.run_id", "task.round", "enrollment.client_id", "task.secagg.round_id")
    for field in integers:
        assert got[field, "7"] == 7 and got[field, "-0"] == 0
        assert got[field, "2147483647"] == 2147483647
        for number in ("1.0", "1e0", "1.5", "-1", "true", "\"1\"", "NaN", "2147483648",
                       "9007199254740993", "9223372036854775808", "1e400"):
            assert got[field, number] == "refused", (field, number)
    assert got["task.config.input_shape", "7"] == 7
    assert got["task.config.input_shape", "1.0"] == got["task.config.input_shape", "0"] \
        == "refused"
    assert got["task.retry_after", "1.0"] == got["task.retry_after", "1e0"] == 1.0
    assert got["task.retry_after", "3600.5"] == got["task.retry_after", "true"] == "refused"
    assert got["task.clip_norm", "9223372036854775808"] == 2**63
    assert got["task.clip_norm", "0"] == got["task.clip_norm", "NaN"] == "refused"
    assert got["task.config.lr_schedule.lr", "-1"] == "refused"
    assert got["task.config.lr_schedule.decay", "1e-300"] == "refused"  # underflows to 0
    assert got["task.config.lr_schedule.decay", "0.5"] == 0.5
