"""Datasets, partitioners and label noise: how data reaches the clients."""

from pflkit.sdk.data.datasets import DATASETS, dataset_spec, load_dataset
from pflkit.sdk.data.federation import (
    ClientData,
    Federation,
    PartitionConfig,
    build_federation,
    partition_table,
    plot_partition,
)
from pflkit.sdk.data.spec import (
    Dataset,
    DatasetError,
    DatasetNotFoundError,
    DatasetSource,
    DatasetSpec,
    Preprocessing,
    Standardize,
)
from pflkit.sdk.data.tensors import LabeledTensors

__all__ = [
    "DATASETS",
    "ClientData",
    "Dataset",
    "DatasetError",
    "DatasetNotFoundError",
    "DatasetSource",
    "DatasetSpec",
    "Federation",
    "LabeledTensors",
    "PartitionConfig",
    "Preprocessing",
    "Standardize",
    "build_federation",
    "dataset_spec",
    "load_dataset",
    "partition_table",
    "plot_partition",
]
