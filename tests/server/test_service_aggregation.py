"""The server's aggregation settings in-process: robust rules, clipping, clients per round.

Each test runs on a SQLite file and on a real PostgreSQL database (``database_url``).
"""

from __future__ import annotations

import numpy as np
import pytest
from service_harness import current, global_of, service_for, shifted

from pflkit.sdk.tensorio import state_to_bytes


def test_median_rule_ignores_an_outlier(tmp_path, database_url):
    service, _ = service_for(tmp_path, database_url, per_round=3, aggregation="median")
    status, rnd = current(service)
    for cid, value in zip(rnd["sampled"], [1.0, 2.0, 1000.0], strict=True):
        service.uploads.accept(cid, status["id"], 0, 10 if value < 10 else 10_000,
                              shifted(service, status["global_hash"], value))
    service.rounds.tick()
    status, _ = current(service)
    assert status["rounds_done"] == 1
    assert all(bool((v == 2).all()) for v in global_of(service, status["global_hash"]).values())


def test_norm_clipping_bounds_each_change(tmp_path, database_url):
    service, _ = service_for(tmp_path, database_url, per_round=3, clip_norm=1.0)
    assert change_of_a_round_of_big_updates(service) == pytest.approx(1.0, rel=1e-4)


def test_the_servers_clients_per_round_overrides_the_run_configs(tmp_path, database_url):
    service, _ = service_for(tmp_path, database_url, per_round=2, clients_per_round=3)
    assert len(current(service)[1]["sampled"]) == 3


@pytest.mark.parametrize("run_clip, server_clip", [(1.0, None), (1.0, 3.0), (3.0, 1.0)])
def test_the_run_configs_clip_norm_applies_and_the_stricter_bound_wins(
        tmp_path, database_url, run_clip, server_clip):
    """Issue 23 item 2: the server applies the run's [aggregation], at least its own settings."""
    service, _ = service_for(tmp_path, database_url, per_round=3, clip_norm=server_clip,
                             run_extra=f"[aggregation]\nclip_norm = {run_clip}\n")
    assert change_of_a_round_of_big_updates(service) == pytest.approx(1.0, rel=1e-4)


def change_of_a_round_of_big_updates(service) -> float:
    """Every sampled client sends global + 5; the L2 norm of the round's change to the global."""
    status, rnd = current(service)
    start = global_of(service, status["global_hash"])
    for cid in rnd["sampled"]:
        service.uploads.accept(cid, status["id"], 0, 10,
                              state_to_bytes({k: v + 5 for k, v in start.items()}))
    service.rounds.tick()
    new = global_of(service, current(service)[0]["global_hash"])
    return float(np.sqrt(sum(float(((new[k] - start[k]) ** 2).sum()) for k in start)))
