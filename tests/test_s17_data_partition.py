"""More clients than train rows is one line naming the setting, whatever the kind.

It was "5000 clients but only 600 samples": no key to change, from pfl-sim's exit 2.
"""

from __future__ import annotations

import pytest
import torch

from pflkit.sdk.data import Dataset, PartitionConfig, build_federation
from pflkit.sdk.data.partition import PartitionError


@pytest.mark.parametrize("kind", ["iid", "shards", "dirichlet"])
def test_more_clients_than_rows_names_data_num_clients(kind: str):
    x, y = torch.zeros(20, 3), torch.arange(20) % 2
    data = Dataset.from_raw("small", ["a", "b"], (x, y), (x, y))
    config = PartitionConfig(kind, num_clients=50, min_size=0) if kind == "dirichlet" else \
        PartitionConfig(kind, num_clients=50)
    with pytest.raises(PartitionError) as refused:
        build_federation(data, config, seed=0)
    assert str(refused.value) == ("data.num_clients = 50: more clients than the 20 train rows "
                                  "(each client needs at least one)")
    assert len(build_federation(data, PartitionConfig("iid", num_clients=20), 0).clients) == 20
