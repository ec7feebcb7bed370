"""Integers in paths and queries: one spelling each, as JSON writes them, in a stated range.

FastAPI reads a path or query integer as Python's ``int()`` does: ``5_0`` was 50, and
``+5``, `` 5`` and ``05`` were 5. A proxy, a cache or an access log reads those apart from
the server, and ``int()`` has no size bound until its 4300-digit limit. Here every integer from
outside is ASCII digits, a ``-`` only before a negative one, no leading zero (JSON's grammar,
as the JSON bodies already read), and within its range; anything else gets 422 naming the
parameter and its range, without echoing the value. A query parameter given twice gets 400,
as a JSON key named twice does: FastAPI took the last value, where a proxy may read the first.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Annotated

from fastapi import Path, Request
from pydantic import BeforeValidator
from pydantic_core import PydanticCustomError

from pflkit.sdk.protocol import MAX_ID
from pflkit.server.errors import BadRequest

_INTEGER = re.compile(r"0|-?[1-9][0-9]*")


def plain_integer(low: int, high: int) -> BeforeValidator:
    """A validator for ``Annotated[int, ...]``: the text of an integer in [low, high]."""
    digits = max(len(str(low)), len(str(high)))  # int() of a longer text is refused unread
    message = f"must be an integer in [{low}, {high}], in ASCII digits without a leading zero"

    def check(value: object) -> int:
        if isinstance(value, str) and len(value) <= digits and _INTEGER.fullmatch(value):
            number = int(value)
            if low <= number <= high:
                return number
        raise PydanticCustomError("integer", message)

    return BeforeValidator(check)


# a run, round, client or enrollment token in a path (the ids' range, sdk/protocol.py); the
# validator after Path(): before it, the OpenAPI schema says "le" where it means "maximum"
IdPath = Annotated[int, Path(ge=0, le=MAX_ID), plain_integer(0, MAX_ID)]


def one_value_per_query_name(request: Request) -> None:
    """Refuse (400) a query that names a parameter twice (an app-wide dependency)."""
    counts = Counter(name for name, _ in request.query_params.multi_items())
    for name, count in counts.items():
        if count > 1:
            raise BadRequest(f"the query names {name[:64]!r} {count} times; give it once")
