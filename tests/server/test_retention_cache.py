"""A server that serves run after run keeps the caches of its newest runs only (store.py).

Each run's terms and setup (its algorithm, built with PyTorch: a model's worth of memory) were
kept for every run a process had ever served; over months of runs that grew without bound.
"""

from __future__ import annotations

from server_harness import run_toml
from service_harness import service_for

from pflkit.server.store import RUNS_CACHED


def test_runs_evicted_from_the_cache_still_serve_and_the_cache_stays_bounded(tmp_path):
    service, _ = service_for(tmp_path, None)  # run 1, its round 0 open
    store = service.store
    service.runs.transition(1, "stop")
    first = service.runs.status(1)
    for rounds in range(2, RUNS_CACHED + 4):  # each run different: its own round count
        run = service.runs.create(run_toml("fedavg", rounds=rounds, per_round=2))
        assert service.runs.status(run.id)["rounds_total"] == rounds
        service.rounds.tick()  # the keeper builds the new run's setup: round 0 opens
        assert service.runs.status(run.id)["current_round"]["index"] == 0
        assert len(store.run_terms) <= RUNS_CACHED and len(store.run_setups) <= RUNS_CACHED
        if rounds < RUNS_CACHED + 3:
            service.runs.transition(run.id, "stop")

    # run 1 was evicted long ago: read again from the database, it answers as before
    again = service.runs.status(1)
    assert again["algorithm"] == "fedavg" and again["rounds_total"] == 5
    assert again == first
    with store.transaction() as s:
        assert store.setup(store.get_run(s, 1)).config.rounds == 5
    # and the newest run, whose entries the old ones' reloads may have pushed out, goes on
    newest = service.runs.status(None)
    assert service.tasks.task(newest["current_round"]["sampled"][0])["status"] == "train"
