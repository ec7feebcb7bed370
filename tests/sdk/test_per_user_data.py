"""Real per-user data: every user's rows stay that user's, and every row and user is counted.

A company's logs: users of 1 to 60 rows with sparse ids, some too small for an own test row,
some below min_size; a device's own data file as an app writes it.
"""

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from waiting import GUARD

from pflkit.sdk.client_data import load_client_data
from pflkit.sdk.data import Dataset, DatasetError, PartitionConfig, load_dataset
from pflkit.sdk.data.federation import Partition, deal_dataset, partition_table
from pflkit.sdk.run_config import ConfigError, SimConfig
from pflkit.sdk.tensorio import CorruptStateError, save_state
from pflkit.server.simulator import Simulation

BIN = Path(sys.executable).parent
SIZES = {7: 1, 11: 2, 42: 30, 99: 60, 1000: 4, 5: 45}  # user id -> rows


def write_logs(root: Path) -> np.ndarray:
    """The folder dataset of SIZES' users, rows shuffled; returns the user column."""
    rng = np.random.default_rng(0)
    users = rng.permutation(np.repeat(list(SIZES), list(SIZES.values())))
    np.save(root / "train_x.npy", rng.normal(size=(len(users), 5)).astype(np.float32))
    np.save(root / "train_y.npy", rng.integers(0, 3, size=len(users)))
    np.save(root / "train_users.npy", users)
    np.save(root / "test_x.npy", rng.normal(size=(30, 5)).astype(np.float32))
    np.save(root / "test_y.npy", rng.integers(0, 3, size=30))
    return users


def test_the_partition_table_accounts_for_every_train_row(tmp_path):
    users = write_logs(tmp_path)
    data = load_dataset("folder", tmp_path)
    config = PartitionConfig("natural", num_clients=3, min_size=3, test_fraction=0.25)
    part = deal_dataset(data, config, 0)  # 42, 99, 1000, 5 qualify; the cap keeps 3
    federation = part.federation(data)
    kept = {int(u) for u in part.users.ids}
    for cid in federation.clients:  # no row of another user, none twice
        rows = np.concatenate([part.train[cid], part.test[cid]])
        assert (users[rows] == part.users.ids[cid]).all() and len(set(rows)) == len(rows)
        assert len(rows) == SIZES[int(part.users.ids[cid])]
    capped = sum(n for u, n in SIZES.items() if n >= 3 and u not in kept)
    test = sum(len(t) for t in part.test.values())
    line = (f"rows: {sum(SIZES[u] for u in kept)} of the dataset's {len(users)} train rows are "
            f"the clients' ({sum(SIZES[u] for u in kept) - test} train, {test} own test); 3 "
            f"dropped with the users below min_size, {capped} left out by the cap")
    if 1000 in kept:  # 4 rows: round(0.25 * 4) = 1 test row, so every kept user has one
        assert all(len(t) for t in part.test.values())
    assert partition_table(federation).splitlines()[-1] == line
    stored = Partition.from_state(part.to_state())  # the run folder's copy says the same
    assert stored.users.rows == part.users.rows
    older = {k: v for k, v in part.to_state().items() if k != "users.rows"}
    assert Partition.from_state(older).users.rows is None  # a partition stored before


NATURAL = """\
seed = 0
rounds = 1
eval_interval = 1
checkpoint_interval = 1

[data]
dataset = "folder"
root = "{root}"
kind = "natural"
min_size = 1
test_fraction = 0.25

[model]
name = "twonn"

[algorithm]
name = "fedavg"

[training]
clients_per_round = 2
epochs = 1
batch_size = 8
lr = 0.05
"""


def test_users_too_small_for_a_test_row_are_counted_out_of_the_own_test_means(tmp_path):
    write_logs(tmp_path)
    config = SimConfig.from_toml(NATURAL.format(root=tmp_path))
    Simulation(config, tmp_path / "run", progress=False).run()
    final = json.loads((tmp_path / "run" / "final.json").read_text())["clients"]
    own = [c["own_top1"] for c in final["per_client"] if c["own_top1"] is not None]
    assert len(own) == 4 and len(final["per_client"]) == 6  # users 7 (1 row), 11 (2): none
    assert final["summary"]["own_clients"] == 4 and final["summary"]["clients"] == 6
    assert final["summary"]["own_top1_mean"] == pytest.approx(sum(own) / 4)
    table = (tmp_path / "run" / "partition.txt").read_text().splitlines()
    assert table[-1].endswith("; 2 clients have too few rows for an own test row (their "
                              "own-test scores are null)")
    assert "| clients: own_clients | 4" in (tmp_path / "run" / "report.md").read_text()


X, Y = torch.zeros(4, 2), torch.tensor([0, 1, 0, 1])


@pytest.mark.parametrize(("per_user", "message"), [
    ({"007": (X[:2], Y[:2]), "7": (X[2:], Y[2:])}, r"from_users takes int64 user ids, got '007'"),
    ({"alice": (X, Y)}, r"got 'alice': number the users"),
    ({1.7: (X, Y), 1: (X, Y)}, r"got 1\.7"),
    ({True: (X, Y)}, r"got True"),
    ({2**70: (X, Y)}, r"got 1180591620717411303424"),
    ({3: (X, Y), 0: (torch.zeros(4, 3), Y)}, r"user 0's inputs are \(3,\), the first user's "
                                             r"\(2,\)"),
    ({3: (X, Y[:3])}, r"user 3 has x \(4, 2\) and y \(3,\): one label per row of x"),
])
def test_from_users_refuses_ids_that_would_merge_users_in_one_line(per_user, message):
    with pytest.raises(DatasetError, match=r"^dataset 'd': .*" + message):
        Dataset.from_users("d", "ab", per_user, (X, Y))


def test_from_users_keeps_each_users_rows_under_its_own_id():
    data = Dataset.from_users("d", "ab", {0: (X[:1], Y[:1]), np.int64(-5): (X, Y),
                                          9: (X[:0], Y[:0])}, (X, Y))
    assert data.users.tolist() == [0, -5, -5, -5, -5]  # a user with no rows: no rows dealt


@pytest.mark.parametrize("users", [np.array([1.2, 1.7, 3.0, 4.0]),
                                   np.array([1.0, np.nan, np.nan, 2.0])])
def test_a_float_user_column_is_refused_not_rounded_into_fewer_users(users):
    with pytest.raises(DatasetError, match=r"^dataset 'd': users must be int64 \(4,\), one per "
                                           r"train row, got torch.float64 \(4,\): ids are never "
                                           r"rounded"):
        Dataset.from_raw("d", "ab", (X, Y), (X, Y), users=users)


NO_ROWS = {"x": torch.zeros(0, 5), "y": torch.zeros(0, dtype=torch.int64)}


@pytest.mark.parametrize(("rows", "problem"), [
    (NO_ROWS, r"holds no rows \(N = 0\): a device needs at least one row to train on"),
    ({"x": torch.zeros(4, 5), "y": torch.tensor([0, 2, -1, 1])},
     r"label -1 at row 2 is below 0 \(labels are 0..C-1\)"),
    ({"x": torch.zeros(4, 5), "y": torch.zeros(3, dtype=torch.int64)},
     r"need x float32 \(N, \*input_shape\) and y int64 \(N,\), got x torch.float32 \(4, 5\), "
     r"y torch.int64 \(3,\)"),
])
def test_a_devices_rows_that_pfl_sim_would_never_deal_are_refused_naming_the_file(tmp_path,
                                                                                  rows, problem):
    save_state(tmp_path / "data.safetensors", rows)
    where = re.escape(str(tmp_path / "data.safetensors"))
    with pytest.raises(CorruptStateError, match=f"^{where}: {problem}$"):
        load_client_data(tmp_path)


def test_pfl_client_with_no_rows_stops_in_one_line_before_enrolling(tmp_path):
    save_state(tmp_path / "data.safetensors", NO_ROWS)
    done = subprocess.run([str(BIN / "pfl-client"), "--server", "http://127.0.0.1:9", "--data",
                           str(tmp_path), "--token", "t"], capture_output=True, text=True,
                          timeout=GUARD)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        f"pfl-client: {tmp_path / 'data.safetensors'}: holds no rows (N = 0): a device needs at "
        "least one row to train on"]
    assert not (tmp_path / ".pflkit").exists()  # nothing written, nothing enrolled


def test_a_run_whose_users_changed_is_not_resumed_on_other_users_data(tmp_path):
    """``--resume`` deals the data again: a user added while the run was stopped (sorting
    first) moved every client id to another user's rows, silently, while pfl-export kept
    reading the stored deal."""
    users = write_logs(tmp_path)
    config = SimConfig.from_toml(NATURAL.format(root=tmp_path).replace("rounds = 1",
                                                                         "rounds = 3"))
    sim = Simulation(config, tmp_path / "run", progress=False)
    sim.run_round()
    sim.close()
    metrics = (tmp_path / "run" / "metrics.jsonl").read_bytes()
    Simulation.resume(tmp_path / "run", progress=False).close()  # the same data: it goes on
    users[:5] = -1  # the logs grew a user between stop and resume
    np.save(tmp_path / "train_users.npy", users)
    with pytest.raises(ConfigError, match=r"^--resume .*run: the data deals the clients other "
                       r"rows than when the run began") as err:
        Simulation.resume(tmp_path / "run", progress=False)
    assert "\n" not in str(err.value)
    assert (tmp_path / "run" / "metrics.jsonl").read_bytes() == metrics  # nothing changed
