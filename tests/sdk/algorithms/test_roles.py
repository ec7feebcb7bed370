"""The algorithm contract in roles: a method composes device training, server aggregation,
personalization and inference, each its own class, and keeps nothing else public."""

from __future__ import annotations

import pytest

from pflkit.sdk.algorithms import (
    ALGORITHMS,
    Algorithm,
    DeviceTraining,
    Inference,
    LocalTraining,
    ModelFactory,
    Personalization,
    ServerAggregation,
    make_algorithm,
)
from pflkit.sdk.algorithms.base import algorithm_class
from pflkit.sdk.algorithms.fedavg import FedAvgTraining
from pflkit.sdk.registry import ExtensionError

FACTORY = ModelFactory("twonn", (1, 8, 8), 10)
ROLES = {"training": DeviceTraining, "aggregation": ServerAggregation,
         "personalization": Personalization, "inference": Inference}


def test_the_algorithm_base_class_offers_its_settings_and_its_four_roles_only():
    public = {n for n in dir(Algorithm) if not n.startswith("_")}  # name, Training: declared
    assert public == {"Params", "Aggregation", "Personalization", "Inference", "to", "new_model",
                      "template", "check_local", "check_rates"}  # settings vs [training], its lr
    algo = make_algorithm("fedavg", FACTORY, LocalTraining())
    instance = {n for n in vars(algo) if not n.startswith("_")}
    assert instance == {"model_factory", "local", "params", "device", *ROLES}


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_every_method_builds_each_role_bound_to_itself(name):
    algo = make_algorithm(name, FACTORY, LocalTraining(epochs=1))
    for attribute, role in ROLES.items():
        part = getattr(algo, attribute)
        assert isinstance(part, role) and part.method is algo
        assert part.params is algo.params and part.local is algo.local


def test_a_role_sees_the_device_the_method_moves_to():
    algo = make_algorithm("fedavg", FACTORY, LocalTraining())
    algo.to("meta")
    assert all(str(getattr(algo, r).device) == "meta" for r in ROLES)


class ChangesFit(FedAvgTraining):
    """Inherits FedAvg's batched trainer but changes fit: batching would train FedAvg's loss."""

    def fit(self, global_state, client_state, data, ctx):
        return super().fit(global_state, client_state, data, ctx)


class ChangesStrength(FedAvgTraining):
    """Changes a hook that fit and fit_together both read: batching stays right."""

    @property
    def proximal_strength(self) -> float:
        return 0.5


@pytest.mark.parametrize(("training", "reason"), [
    (ChangesFit, "mine changes fit but has no batched version of it"),
    (ChangesStrength, None),
])
def test_a_training_role_that_changes_fit_but_inherits_fit_together_cannot_batch(training,
                                                                                   reason):
    method = type("Mine", (Algorithm,), {"name": "mine", "Training": training})
    assert method(FACTORY, LocalTraining()).training.batching_blocker() == reason


def test_a_method_that_names_no_training_is_refused_in_one_line():
    bare = type("Bare", (Algorithm,), {"name": "bare", "__module__": __name__})
    globals()["Bare"] = bare
    try:
        with pytest.raises(ExtensionError, match=r"^algorithm '[^']*:Bare': its class names no "
                                                 r"Training \(Training = a subclass of "):
            algorithm_class(f"{__name__}:Bare")
    finally:
        del globals()["Bare"]
