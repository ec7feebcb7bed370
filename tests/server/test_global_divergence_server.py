"""pfl-server never commits a global state with NaN or Inf: the run stops, saying why (status).

Each upload is finite (and checked so), but SCAFFOLD's server step ``x + server_lr * (mean -
x)`` at server_lr 10 takes uploads near float32's largest value past it. Before, that Inf
global was committed, served to every device and aggregated from in every later round.
"""

from __future__ import annotations

import logging

import torch
from rich.console import Console
from server_harness import run_toml
from service_harness import current, global_of

from pflkit.sdk.tensorio import state_to_bytes
from pflkit.server.admin_view import render_status
from pflkit.server.api.schemas import RunPublic
from pflkit.server.orm import Run
from pflkit.server.service import build_service
from pflkit.server.settings import ServerSettings


def test_a_non_finite_aggregate_stops_the_run_and_keeps_the_last_global(tmp_path, caplog):
    config = tmp_path / "run.toml"
    config.write_text(run_toml("scaffold", rounds=3, per_round=3, params="server_lr = 10.0"))
    service = build_service(ServerSettings(admin_token="x" * 20, data_dir=tmp_path / "data",
                                           run_config=config, min_enrolled=3))
    service.runs.ensure()
    for cid in range(3):
        service.enrollment.enroll(service.enrollment.issue_token(cid, None)[1])
    service.rounds.tick()
    status, rnd = current(service)
    start = status["global_hash"]
    with service.store.transaction() as s:
        setup = service.store.setup(s.get(Run, status["id"]))
    schema = setup.algorithm.aggregation.update_schema(global_of(service, start))
    upload = state_to_bytes({n: torch.full(shape, 3e38, dtype=dtype)
                             for n, (shape, dtype) in schema.items()})
    for cid in rnd["sampled"]:  # finite: every upload is accepted
        service.uploads.accept(cid, status["id"], 0, 10, upload)
    with caplog.at_level(logging.ERROR):
        service.rounds.tick()
        service.rounds.tick()  # a stopped run is not closed again
    after = service.runs.status(None)
    assert after["status"] == "stopped" and after["rounds_done"] == 0
    assert after["global_hash"] == start and after["current_round"] is None
    assert all(bool(torch.isfinite(t).all()) for t in global_of(service, start).values())
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and "has NaN or Inf (the global model diverged)" in errors[0]
    assert "has NaN or Inf (the global model diverged)" in after["stopped_reason"]
    console = Console(width=200, record=True)
    console.print(render_status(RunPublic(**after)))
    assert "stopped by the server: round 0: the aggregate's tensor" in console.export_text()
