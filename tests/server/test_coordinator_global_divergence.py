"""The Coordinator never makes a non-finite aggregate the global state (pfl-sim's path).

Every update is finite, but SCAFFOLD's server step at server_lr 10 takes uploads near
float32's largest value past it: before, the Inf state became the global one and every later
round trained from it.
"""

import pytest
import torch

from pflkit.sdk.algorithms import LocalTraining, ModelFactory, make_algorithm
from pflkit.sdk.run_config import Sampling, Schedule
from pflkit.server.coordinator import Coordinator, GlobalDiverged
from pflkit.server.sim_divergence import what_next


def test_a_non_finite_aggregate_is_refused_and_the_round_and_global_stay(tmp_path):
    algo = make_algorithm("scaffold", ModelFactory("twonn", (1, 8, 8), 10), LocalTraining(),
                          {"server_lr": 10.0})
    start = algo.aggregation.init_global(0)
    coord = Coordinator(algo, Schedule(3, Sampling(clients_per_round=2)), list(range(4)),
                        start, seed=5)
    schema = algo.aggregation.update_schema(start)
    for cid in coord.open_round().sampled:  # finite: accepted
        coord.submit(cid, 10, {n: torch.full(shape, 3e38, dtype=dtype)
                               for n, (shape, dtype) in schema.items()})
    with pytest.raises(GlobalDiverged, match=r"^round 0: the aggregate's tensor '.+' has NaN or "
                                             r"Inf \(the global model diverged\); it is not "
                                             r"committed$"):
        coord.close_round()
    assert coord.round == 0 and coord.global_state is start
    assert all(bool(torch.isfinite(t).all()) for t in start.values())
    assert "pfl-sim --resume" not in what_next(GlobalDiverged("x"), tmp_path)
    assert f"pfl-sim --resume {tmp_path}" in what_next(ValueError("x"), tmp_path)
