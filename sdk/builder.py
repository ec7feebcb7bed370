"""Config -> data -> model factory -> algorithm: the one recipe every entry point follows.

``pfl-sim`` (:func:`build_run`), ``pfl-server`` (:func:`build_algorithm` on the spec alone: it
never reads the clients' data), ``pfl-export`` (:func:`load_data` + :func:`build_algorithm`)
and the SDK client (:func:`algorithm_for`, from the task the server sends) all build through
here, so a user's model, dataset or algorithm resolves the same way in each of them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pflkit.sdk.algorithms.base import Algorithm, LocalTraining, ModelFactory, make_algorithm
from pflkit.sdk.data.datasets import dataset_spec, load_dataset
from pflkit.sdk.data.federation import Federation, Partition, deal_dataset
from pflkit.sdk.data.spec import Dataset, DatasetSpec
from pflkit.sdk.run_config import ConfigError, SimConfig


def image_size(config: SimConfig) -> tuple[int, int] | None:
    """The (H, W) images are resized to, if the config asks for it."""
    side = config.data.resize
    return (side, side) if side else None


def load_data(config: SimConfig) -> Dataset:
    """The config's dataset, preprocessed (deterministic in the seed)."""
    return load_dataset(config.data.dataset, config.data.root, image_size(config),
                        seed=config.seed)


def data_spec(config: SimConfig, root: Path | None = None) -> DatasetSpec:
    """The dataset's spec without its data when the dataset can tell (the server's case).

    A dataset that cannot reads its files in ``root``: the server's confined folder, else
    the config's ``[data] root``.
    """
    return dataset_spec(config.data.dataset, image_size(config), root or config.data.root)


def algorithm_for(algorithm: str, params: Mapping[str, Any], model: str,
                  input_shape: Sequence[int], num_classes: int,
                  local: LocalTraining) -> Algorithm:
    """The algorithm for a model on inputs of ``input_shape`` (the client's entry point)."""
    factory = ModelFactory(model, tuple(int(v) for v in input_shape), int(num_classes))
    return make_algorithm(algorithm, factory, local, params)


def build_algorithm(config: SimConfig, spec: DatasetSpec) -> Algorithm:
    """The config's algorithm for a dataset of this spec."""
    return algorithm_for(config.algorithm.name, config.algorithm.params, config.model.name,
                         spec.input_shape, spec.num_classes, config.training.local())


def partition_of(config: SimConfig, dataset: Dataset) -> Partition:
    """The seeded deal of the dataset's train rows to the config's clients.

    A natural partition's clients are the users its data holds, known only now: a round
    sample larger than them is refused here, before a run writes anything.
    """
    partition = deal_dataset(dataset, config.data, config.seed)
    trainers = len(partition.train) - len(partition.new_clients)
    try:
        config.schedule().sample_size(trainers)
    except ValueError as err:
        raise ConfigError(f"training.clients_per_round: {err} ({partition.users.describe()})"
                          if partition.users else f"training: {err}") from None
    return partition


def build_run(config: SimConfig) -> tuple[Federation, Algorithm]:
    """The federation and the algorithm a config describes (deterministic in the seed)."""
    dataset = load_data(config)
    algorithm = build_algorithm(config, dataset.spec)
    return partition_of(config, dataset).federation(dataset), algorithm
