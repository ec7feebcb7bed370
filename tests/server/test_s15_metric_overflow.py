"""A round metric whose weighted mean would overflow closes as a number, on either database.

Before: two devices reporting ``loss = 1e308`` (finite, accepted) for 1000 samples each (within
``max_num_samples``) made the round's sample-weighted sum overflow to infinity; PostgreSQL
refused the ``Infinity`` in the round's metrics, so the close failed every tick and the run
never went on. SQLite stored it and the API showed null. The mean is now convex (never past
the largest value), and JSON columns store any non-finite float as null (server/db.py).
"""

from __future__ import annotations

import json

from api_harness import open_round, upload, valid_update
from server_harness import run_toml

from pflkit.sdk.tensorio import state_to_bytes


def test_a_round_whose_metric_mean_overflows_still_closes(database_url, make_server):
    database = ["--database-url", database_url] if database_url else []
    server = make_server(run_toml("fedavg", rounds=2), "--min-enrolled", "3",
                         "--max-num-samples", "1000", *database)
    secrets = {cid: server.enroll(cid)[1] for cid in range(3)}
    rnd = open_round(server, secrets)
    body = state_to_bytes(valid_update(rnd), {"metrics": json.dumps({"loss": 1e308})})
    for secret in rnd["sampled"]:
        reply = upload(server, rnd, secret, body, num_samples=1000)
        assert reply.status_code == 200, reply.text
    status = server.wait_for(lambda s: s["rounds_done"] == 1)
    metrics = status["history"][0]["metrics"]
    assert (metrics["participants"], metrics["samples"]) == (2, 2000)
    assert metrics["loss"] == 1e308
