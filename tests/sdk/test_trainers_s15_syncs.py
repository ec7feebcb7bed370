"""A client's fit (and its post-federation stage's pass) waits for its device a fixed number
of times, whatever its steps.

The sequential executor and a phone run :meth:`fit`; APFL and pFedMe read every step's loss
on the host (``float(loss)``), a GPU stall per step (issue 22). The mean loss now stays on the
device until the round's losses are read together.
"""

from collections import Counter

import pytest
from fake_cuda import FakeCuda
from test_batched_training import FACTORY, jobs_for

from pflkit.sdk.algorithms import ClientState, LocalTraining, make_algorithm
from pflkit.sdk.device import data_to, state_to


def fit_syncs(name: str, epochs: int) -> Counter:
    """Host synchronizations of two clients' one-by-one fits on the fake device."""
    algorithm = make_algorithm(name, FACTORY, LocalTraining(epochs=epochs, batch_size=8))
    with FakeCuda() as fake:
        algorithm.to("cuda")
        glob = state_to(algorithm.aggregation.init_global(0), "cuda")
        for job in jobs_for(algorithm, 0)[:2]:
            state = ClientState(state_to(job.client_state.tensors, "cuda"), job.client_state.meta)
            result = algorithm.training.fit(glob, state, data_to(job.data, "cuda"), job.ctx)
            assert result.metrics["train_loss"].device.type == "cuda"  # read with the round's
    return Counter(fake.syncs)


@pytest.mark.parametrize("name", ["apfl", "pfedme"])
def test_a_fit_reads_its_loss_once_not_once_per_step(name):
    assert fit_syncs(name, 3) == fit_syncs(name, 1)


def stage_syncs(batch_size: int) -> Counter:
    """Host synchronizations of one client's PFL-MoE stage 2 on the fake device."""
    algorithm = make_algorithm("pflmoe", FACTORY, LocalTraining(epochs=1, batch_size=8),
                               {"variant": "mfe", "epochs": 2, "batch_size": batch_size})
    with FakeCuda() as fake:
        algorithm.to("cuda")
        glob = state_to(algorithm.aggregation.init_global(0), "cuda")
        job = jobs_for(algorithm, 0)[0]
        state = ClientState(state_to(job.client_state.tensors, "cuda"), job.client_state.meta)
        algorithm.personalization.personalize(glob, state, data_to(job.data, "cuda"), job.ctx)
    return Counter(fake.syncs)


def test_a_post_federation_stage_reads_its_loss_once_per_pass_not_once_per_step():
    """The session's step returned ``float(loss)``: a stall per step of a 200-epoch stage."""
    assert stage_syncs(2) == stage_syncs(16)
