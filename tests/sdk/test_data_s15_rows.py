"""Rows no client may get: a device's file it would refuse, a Dirichlet client with no rows.

Before the fixes: ``save_client_data`` wrote rows that ``pfl-client`` then refused at start
(no rows, a label below 0, NaN, an input beyond float32 written as inf) and cast a complex
input to its real part silently; ``min_size = 0`` let the Dirichlet deal leave clients with
no row at all, though docs/data.md says pfl-sim never deals such a client (37 of 50 at
alpha 0.001: a round that samples one trains nothing).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from pflkit.sdk.client import load_client_data, save_client_data
from pflkit.sdk.data import DatasetError, PartitionConfig, load_dataset, partition
from pflkit.sdk.data.federation import deal
from pflkit.sdk.data.tensors import LabeledTensors

X, Y = torch.rand(3, 4), torch.tensor([0, 1, 2])

UNSAVABLE = {  # the rows -> the line
    "no rows": (X[:0], Y[:0], "the device's data: holds no rows (N = 0): a device needs at "
                              "least one row to train on"),
    "a label below 0": (X, torch.tensor([0, -1, 2]), "the device's data: label -1 at row 1 is "
                                                     "below 0 (labels are 0..C-1)"),
    "NaN": (torch.where(X > 2, X, torch.nan), Y, "the device's data: x has NaN or Inf in 3 "
                                                  "row(s), the first at row 0"),
    "beyond float32": (torch.full((3, 4), 1e300, dtype=torch.float64), Y,
                       "the device's data's x holds 1e+300 at row 0, beyond float32 (inputs "
                       "are float32: |x| <= 3.4e38)"),
    "complex": (X.to(torch.complex64), Y, "the device's data's x holds torch.complex64 "
                                          "values, not real numbers"),
    "labels (N, 1)": (X, Y[:, None], "the device's data has x (3, 4) and y (3, 1): one label "
                                     "per row of x, and x (N, ...) has at least 2 axes (a "
                                     "column of N values is (N, 1))"),
}


@pytest.mark.parametrize("case", list(UNSAVABLE))
def test_save_client_data_refuses_rows_the_device_would_refuse_and_writes_nothing(tmp_path,
                                                                                  case):
    x, y, line = UNSAVABLE[case]
    path = tmp_path / "data.safetensors"
    with pytest.raises(DatasetError) as caught:
        save_client_data(path, LabeledTensors(x, y))
    assert str(caught.value) == line
    assert not path.exists()


def test_what_save_client_data_writes_the_device_reads_back_as_it_was_given(tmp_path):
    """Ints and uint8 labels are converted as documented (float32, int64), nothing else."""
    x, y = torch.arange(12, dtype=torch.int16).reshape(3, 4), torch.tensor([2, 0, 1]).byte()
    save_client_data(tmp_path / "data.safetensors", LabeledTensors(x, y))
    read = load_client_data(tmp_path)
    assert torch.equal(read.x, x.float()) and torch.equal(read.y, y.long())


def test_dirichlet_with_min_size_0_never_deals_a_client_no_rows():
    labels = np.repeat(np.arange(10), 30)
    for seed in range(5):
        parts = partition.dirichlet(labels, 12, 0.05, np.random.default_rng(seed), min_size=0)
        assert min(len(p) for p in parts) >= 1
        assert sorted(np.concatenate(parts).tolist()) == list(range(300))  # each row once


def test_a_dirichlet_deal_that_cannot_give_every_client_a_row_says_what_would_help():
    labels = np.repeat(np.arange(10), 10)
    config = PartitionConfig("dirichlet", num_clients=50, alpha=0.001, min_size=0)
    with pytest.raises(ValueError, match=r"^no Dirichlet\(0.001\) partition gave every one of "
                                         r"50 clients >= 1 samples in 1000 tries; raise alpha "
                                         r"or lower num_clients$"):
        deal(labels, 10, config, seed=0)


def test_a_simulated_federation_at_min_size_0_has_no_empty_client():
    """The run of the report: digits, 50 clients at alpha 0.05 (was: clients of 0 rows)."""
    from pflkit.sdk.data import build_federation

    digits = load_dataset("digits")
    federation = build_federation(digits, PartitionConfig("dirichlet", num_clients=50,
                                                          alpha=0.05, min_size=0), seed=0)
    assert min(len(c.train) for c in federation.all_clients.values()) >= 1
