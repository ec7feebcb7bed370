"""An in-process service with three enrolled clients, and the round helpers of its tests."""

from __future__ import annotations

import torch
from server_harness import run_toml

from pflkit.sdk.tensorio import state_to_bytes
from pflkit.server.service import build_service
from pflkit.server.settings import ServerSettings


def service_for(tmp_path, database_url: str | None, per_round: int = 2, run_extra: str = "",
                **settings):
    config = tmp_path / "run.toml"
    config.write_text(run_toml("fedavg", rounds=5, per_round=per_round) + run_extra)
    values = {"admin_token": "x" * 20, "data_dir": tmp_path / "data", "run_config": config,
              "database_url": database_url, "min_enrolled": 3, **settings}
    service = build_service(ServerSettings(**values))
    service.runs.ensure()
    enrollment = service.enrollment
    clients = dict(enrollment.enroll(enrollment.issue_token(cid, None)[1]) for cid in range(3))
    service.rounds.tick()
    return service, clients


def global_of(service, digest: str):
    return service.store.global_states.get(digest)


def current(service):
    status = service.runs.status(None)
    return status, status["current_round"]


def shifted(service, digest: str, value: float) -> bytes:
    return state_to_bytes({k: torch.full_like(v, value)
                           for k, v in global_of(service, digest).items()})
