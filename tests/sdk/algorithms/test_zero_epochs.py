"""``training.epochs = 0`` (allowed, [0, 1000]) is a fit without a step, not a divergence.

Zero local epochs leave only what a method does outside them (Ditto's ``personal_epochs``,
a post-federation stage such as ``fedavg_ft``'s). Before, the NaN mean loss of zero steps
marked every client as diverged in every round and every update was dropped.
"""

from __future__ import annotations

import math

import pytest
import torch
from baselines_harness import algo, ctx, tiny_data

from pflkit.sdk.algorithms import ALGORITHMS, ClientState, FitResult, LocalTraining
from pflkit.sdk.divergence import defined_loss, diverged

NO_EPOCHS = LocalTraining(epochs=0, batch_size=16)
# a method's own epochs may not exceed E: zero too (fedrep: body_epochs <= E)
OWN = {"fedrep": {"body_epochs": 0}}
CASES = [(n, OWN.get(n, {})) for n in sorted(ALGORITHMS)] + [("scaffold", {"option": 1})]


@pytest.mark.parametrize(("name", "params"), CASES)
def test_a_fit_of_zero_epochs_changes_nothing_and_has_no_loss(name: str, params: dict) -> None:
    method, data = algo(name, local=NO_EPOCHS, **params), tiny_data()
    start = method.aggregation.init_global(seed=0)
    result = method.training.fit(start, method.training.init_client(0, 0, data), data, ctx())
    for key, value in result.update.items():  # the global's values; a change (SCAFFOLD's) 0
        assert torch.equal(value, start[key]) if key in start else not value.any(), key
    assert defined_loss(result) is None and not diverged(result)


def test_ditto_trains_its_personal_model_with_zero_shared_epochs() -> None:
    method, data = algo("ditto", local=NO_EPOCHS, personal_epochs=1), tiny_data()
    start = method.aggregation.init_global(seed=0)
    result = method.training.fit(start, method.training.init_client(0, 0, data), data, ctx())
    assert not diverged(result) and math.isfinite(float(result.metrics["personal_loss"]))
    assert any(not torch.equal(t, start[k.removeprefix("personal.")])
               for k, t in result.client_state.tensors.items())


@pytest.mark.parametrize(("loss", "judged"), [(math.inf, True), (-math.inf, True),
                                              (math.nan, False), (1e30, False)])
def test_an_infinite_loss_is_divergence_an_undefined_one_is_not(loss: float,
                                                                 judged: bool) -> None:
    weights = {"w": torch.ones(2)}
    result = FitResult(weights, ClientState(weights, {}), 4, {"train_loss": loss})
    assert diverged(result) is judged
    assert defined_loss(result) == (None if math.isnan(loss) else loss)
