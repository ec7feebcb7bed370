"""A run's terms: what the server stores once per run and sends, unchanged, in every task.

Each test runs on a SQLite file and on a real PostgreSQL database (``database_url``).
"""

from __future__ import annotations

import torch
from server_harness import run_toml
from sqlalchemy import select, update

from pflkit.sdk.registry import ImportPolicy
from pflkit.sdk.run_config import SimConfig
from pflkit.sdk.task_config import TaskConfig
from pflkit.sdk.tensorio import state_to_bytes
from pflkit.server.orm import RunTermsRow
from pflkit.server.service import build_service
from pflkit.server.settings import ServerSettings

ROUNDS = 3
CONFIG = run_toml("fedavg", rounds=ROUNDS, per_round=3) + "lr_decay = 0.7\n"


def started(tmp_path, database_url):
    (tmp_path / "run.toml").write_text(CONFIG)
    service = build_service(ServerSettings(
        admin_token="x" * 20, data_dir=tmp_path / "data", run_config=tmp_path / "run.toml",
        database_url=database_url, min_enrolled=3))
    service.runs.ensure()
    for cid in range(3):
        service.enrollment.enroll(service.enrollment.issue_token(cid, None)[1])
    service.rounds.tick()
    return service


def test_a_devices_rate_of_every_round_is_the_simulators(tmp_path, database_url):
    service = started(tmp_path, database_url)
    simulated = SimConfig.from_toml(CONFIG).schedule()
    seen = []
    for _ in range(ROUNDS):
        for cid in range(3):
            task = service.tasks.task(cid)
            assert task["status"] == "train", task
            ctx = TaskConfig.from_wire(task["config"], ImportPolicy()).context(task["round"], cid)
            seen.append(ctx.lr)
            assert ctx.lr == simulated.lr_at(task["round"])
            update_ = {k: torch.zeros_like(v) for k, v in
                       service.store.global_states.get(task["global_hash"]).items()}
            service.uploads.accept(cid, task["run_id"], task["round"], 10,
                                   state_to_bytes(update_))
        service.rounds.tick()
    finished = service.tasks.task(0)
    assert finished["status"] == "finished"
    config = TaskConfig.from_wire(finished["config"], ImportPolicy())
    assert config.context(config.total_rounds, 0).lr == simulated.lr_at(ROUNDS)
    assert len(set(seen)) == ROUNDS  # the rate did decay from round to round


def test_the_stored_terms_hold_the_schedule_not_a_rate_per_round(tmp_path, database_url):
    service = started(tmp_path, database_url)
    with service.store.sessions() as s:
        stored = s.scalars(select(RunTermsRow)).one().terms
    assert "lrs" not in stored
    assert stored["task"]["lr_schedule"] == {"lr": 0.05, "decay": 0.7}
    assert stored["task"] == service.tasks.task(0)["config"]  # sent as stored, every round


def test_a_run_stored_by_the_previous_version_gets_its_terms_again(tmp_path, database_url):
    """Before, the task was stored without its rate and with a list of every round's rate."""
    service = started(tmp_path, database_url)
    with service.store.sessions() as s, s.begin():
        row = s.scalars(select(RunTermsRow)).one()
        old = {**row.terms, "task": {k: v for k, v in row.terms["task"].items()
                                     if k != "lr_schedule"},
               "lrs": [0.05 * 0.7**r for r in range(ROUNDS + 1)]}
        s.execute(update(RunTermsRow).values(terms=old))
    service = build_service(service.settings)  # a new process: nothing cached
    task = service.tasks.task(0)
    assert task["config"]["lr_schedule"] == {"lr": 0.05, "decay": 0.7}
    with service.store.sessions() as s:
        assert "lrs" not in s.scalars(select(RunTermsRow)).one().terms
