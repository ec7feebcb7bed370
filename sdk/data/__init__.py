"""Datasets, partitioners and label noise: how data reaches the clients."""

from pflkit.sdk.data.datasets import (
    DATASETS,
    Dataset,
    DatasetNotFoundError,
    DatasetSpec,
    Preprocessing,
    load_dataset,
)
from pflkit.sdk.data.federation import (
    ClientData,
    Federation,
    PartitionConfig,
    build_federation,
    partition_table,
    plot_partition,
)
from pflkit.sdk.data.tensors import LabeledTensors

__all__ = [
    "DATASETS",
    "ClientData",
    "Dataset",
    "DatasetNotFoundError",
    "DatasetSpec",
    "Federation",
    "LabeledTensors",
    "PartitionConfig",
    "Preprocessing",
    "build_federation",
    "load_dataset",
    "partition_table",
    "plot_partition",
]
