"""The Java client's protocol names (android-demo/core Wire.java) match the server's schemas.

The Java tests run the client against a real pfl-server, which covers every path and key they
use; this test also covers the names those tests never meet (e.g. the ``paused`` and
``stopped`` statuses), so a renamed field or status fails here, not on a phone.
"""

from __future__ import annotations

import re
import typing
from pathlib import Path

from pflkit.server.api import schemas

WIRE = (Path(__file__).resolve().parents[2]
        / "android-demo/core/src/main/java/org/pflkit/core/fl/Wire.java")
STATUSES = ("TRAIN", "UPLOADED", "WAIT", "PAUSED", "STOPPED", "FINISHED")
KEYS = {  # Wire constant -> the schema that carries it
    "TOKEN": schemas.EnrollIn, "CLIENT_ID": schemas.CredentialsPublic,
    "SECRET": schemas.CredentialsPublic, "STATUS": schemas.TaskPublic,
    "RETRY_AFTER": schemas.TaskPublic, "RUN_ID": schemas.TaskPublic, "ROUND": schemas.TaskPublic,
    "DEADLINE": schemas.TaskPublic, "GLOBAL_HASH": schemas.TaskPublic,
    "CONFIG": schemas.TaskPublic, "SHA256": schemas.ReceiptPublic,
    "DUPLICATE": schemas.ReceiptPublic, "MAX_NUM_SAMPLES_KEY": schemas.TaskPublic,
}


def wire_strings() -> dict[str, str]:
    text = WIRE.read_text()
    return dict(re.findall(r'public static final String (\w+) = "([^"]*)";', text))


def test_every_task_status_the_server_sends_is_known_to_the_java_client() -> None:
    wire = wire_strings()
    sent = set(typing.get_args(schemas.TaskPublic.model_fields["status"].annotation))
    assert {wire[name] for name in STATUSES} == sent


def test_the_java_clients_json_keys_are_the_schemas_fields() -> None:
    wire = wire_strings()
    for constant, schema in KEYS.items():
        assert wire[constant] in schema.model_fields, (constant, schema.__name__)


def test_the_java_client_uses_the_protocol_modules_names_and_limits() -> None:
    from pflkit.sdk import protocol

    text = WIRE.read_text()
    wire = wire_strings()
    ints = dict(re.findall(r"public static final int (\w+) = (\d+);", text))
    assert wire["METRICS"] == protocol.METRICS_KEY
    assert wire["RETRY_AFTER_HEADER"] == protocol.RETRY_AFTER.lower()
    assert int(ints["MAX_METRICS"]) == protocol.MAX_METRICS
    assert int(ints["MAX_METRIC_NAME"]) == protocol.MAX_METRIC_NAME
