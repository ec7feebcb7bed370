"""The SDK tests' helper modules (``*_harness.py`` beside this file) import by name."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

sys.path.insert(0, str(Path(__file__).parent))

if TYPE_CHECKING:
    from hostile_harness import HostileServer


@pytest.fixture
def hostile() -> Iterator[HostileServer]:
    """A hostile server on loopback (hostile_harness.py), closed after the test."""
    from hostile_harness import serving

    with serving() as server:
        yield server
