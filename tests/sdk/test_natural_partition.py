"""partition.kind = "natural": a dataset's own users are the clients (issue 23 item 4)."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from pflkit.sdk.data import Dataset, DatasetError, load_dataset
from pflkit.sdk.data.federation import (
    Partition,
    PartitionConfig,
    build_federation,
    deal,
    partition_table,
)
from pflkit.sdk.data.spec import check_dataset
from pflkit.sdk.run_config import ConfigError, SimConfig
from pflkit.sdk.rundir import RunDir
from pflkit.sdk.tensorio import save_state
from pflkit.server.simulator import Simulation

EXT_PKG = Path(__file__).resolve().parents[1] / "ext_pkg"


def logs(seed: int = 0, users: int = 40, rows: int = 4000) -> tuple[np.ndarray, np.ndarray]:
    """Shuffled rows of ``users`` users with uneven sizes and sparse ids; 4 labels."""
    rng = np.random.default_rng(seed)
    ids = 1000 + 7 * rng.permutation(users)  # not 0..U-1, not sorted
    owner = ids[rng.choice(users, size=rows, p=rng.dirichlet(np.full(users, 1.0)))]
    return owner, rng.integers(0, 4, size=rows)


def natural(**kw) -> PartitionConfig:
    return PartitionConfig("natural", **{"num_clients": 1000, "min_size": 1, **kw})


def test_each_client_holds_exactly_one_users_rows():
    users, labels = logs()
    part = deal(labels, 4, natural(test_fraction=0.3), 0, users)
    assert list(part.users.ids) == sorted(set(users.tolist()))  # client ids follow user ids
    for cid, uid in enumerate(part.users.ids):
        rows = np.concatenate([part.train[cid], part.test[cid]])
        assert np.array_equal(np.sort(rows), np.flatnonzero(users == uid))
        assert np.all(np.diff(part.train[cid]) > 0) and np.all(np.diff(part.test[cid]) > 0)


def test_the_split_is_per_user_and_seeded():
    users, labels = logs()
    a = deal(labels, 4, natural(test_fraction=0.25), 0, users)
    for cid in a.train:
        n = len(a.train[cid]) + len(a.test[cid])
        assert len(a.test[cid]) == min(round(0.25 * n), n - 1)  # each user keeps a train row
    again = deal(labels, 4, natural(test_fraction=0.25), 0, users)
    other = deal(labels, 4, natural(test_fraction=0.25), 1, users)
    assert all(np.array_equal(a.test[c], again.test[c]) for c in a.test)
    assert list(other.users.ids) == list(a.users.ids)  # same users, other test rows
    assert any(not np.array_equal(a.test[c], other.test[c]) for c in a.test)


def test_min_size_drops_small_users_and_the_table_says_so():
    users, labels = logs()
    counts = {u: int((users == u).sum()) for u in set(users.tolist())}
    small = sorted(u for u, n in counts.items() if n < 60)
    assert 0 < len(small) < len(counts)
    part = deal(labels, 4, natural(min_size=60), 0, users)
    assert set(part.users.ids.tolist()) == set(counts) - set(small)
    assert part.users.too_small == len(small)
    data = Dataset.from_raw("logs", "abcd", (torch.zeros(len(users), 3), labels),
                            (torch.zeros(2, 3), torch.tensor([0, 1])), users=users)
    table = partition_table(build_federation(data, natural(min_size=60), 0), 5)
    assert table.splitlines()[0] == (f"natural partition: {len(counts) - len(small)} of the "
                                     f"dataset's {len(counts)} users are the clients; "
                                     f"{len(small)} dropped (fewer than min_size = 60 rows)")
    assert table.splitlines()[2].split()[:2] == ["0", str(part.users.ids[0])]  # client, user


def test_num_clients_caps_the_users_with_a_seeded_draw():
    users, labels = logs()
    a = deal(labels, 4, natural(num_clients=10), 0, users)
    assert len(a.train) == 10 and a.users.over_cap == 30
    assert list(a.users.ids) == sorted(a.users.ids)
    assert list(deal(labels, 4, natural(num_clients=10), 0, users).users.ids) == list(a.users.ids)
    assert list(deal(labels, 4, natural(num_clients=10), 5, users).users.ids) != list(a.users.ids)


def test_held_out_users_and_the_partition_file_round_trip():
    users, labels = logs()
    part = deal(labels, 4, natural(num_new_clients=5), 0, users)
    assert len(part.new_clients) == 5 and set(part.new_clients) <= set(part.train)
    back = Partition.from_state(part.to_state())
    assert back.new_clients == part.new_clients
    assert np.array_equal(back.users.ids, part.users.ids)
    assert back.users.describe() == part.users.describe()
    assert Partition.from_state(deal(labels, 4, PartitionConfig("iid", 4), 0).to_state()
                                ).users is None


def test_the_partition_file_holds_a_few_tensors_whatever_the_clients_and_reads_old_ones():
    labels = np.random.default_rng(0).integers(0, 4, size=3000)
    part = deal(labels, 4, PartitionConfig("iid", 300, test_fraction=0.2, noise="pair",
                                           noise_rate=0.2), 0)
    state = part.to_state()
    assert len(state) == 10  # new_clients + (rows, clients, sizes) x train, test, labels
    old = {"new_clients": state["new_clients"]}  # the layout before: a tensor per client
    for name, table in (("train", part.train), ("test", part.test), ("labels", part.labels)):
        old.update({f"{name}.{c}": torch.from_numpy(rows) for c, rows in table.items()})
    for back in (Partition.from_state(state), Partition.from_state(old)):
        for name in ("train", "test", "labels"):
            got, want = getattr(back, name), getattr(part, name)
            assert got.keys() == want.keys()
            assert all(np.array_equal(got[c], want[c]) for c in want)


def test_bad_natural_requests_are_one_line_errors():
    users, labels = logs()
    with pytest.raises(ConfigError, match=r'^data.kind: "natural" needs a dataset that names '
                                          r"the user of each train row .*train_users.npy"):
        deal(labels, 4, natural(), 0)
    with pytest.raises(ConfigError, match=r"^data.num_new_clients: 40 leaves no user to train"):
        deal(labels, 4, natural(num_new_clients=40), 0, users)
    with pytest.raises(ValueError, match=r"^data.min_size = 5000: no user has that many rows"):
        deal(labels, 4, natural(min_size=5000), 0, users)


def test_the_dataset_contract_checks_users_and_builds_them_per_user():
    x, y = torch.zeros(4, 2), torch.tensor([0, 1, 0, 1])
    with pytest.raises(DatasetError, match=r"users must be int64 \(4,\), one per train row"):
        check_dataset("d", Dataset.from_raw("d", "ab", (x, y), (x, y), users=torch.zeros(3)))
    data = Dataset.from_users("d", "ab", {7: (x[:3], y[:3]), 2: (x[3:], y[3:])}, (x, y))
    assert data.users.tolist() == [7, 7, 7, 2] and len(data.train) == 4


def test_folder_with_a_user_column_and_without_one(tmp_path):
    users, labels = logs(rows=600)
    for split, n in (("train", 600), ("test", 50)):
        np.save(tmp_path / f"{split}_x.npy", np.ones((n, 3), dtype=np.float32))
        np.save(tmp_path / f"{split}_y.npy", labels[:n])
    plain = load_dataset("folder", tmp_path)
    assert plain.users is None
    with pytest.raises(ConfigError, match="train_users.npy"):
        build_federation(plain, natural(), 0)
    np.save(tmp_path / "train_users.npy", users)
    federation = build_federation(load_dataset("folder", tmp_path), natural(), 0)
    assert len(federation.clients) == len(set(users.tolist()))
    np.save(tmp_path / "train_users.npy", users[:10])
    with pytest.raises(DatasetError, match="train users must be integers, one per train row"):
        load_dataset("folder", tmp_path)


def test_folder_of_safetensors_with_a_users_tensor(tmp_path):
    users, labels = logs(rows=600)
    x = torch.ones(600, 3)
    save_state(tmp_path / "train.safetensors", {"x": x, "y": torch.from_numpy(labels),
                                                "users": torch.from_numpy(users)})
    save_state(tmp_path / "test.safetensors", {"x": x[:5], "y": torch.from_numpy(labels[:5]),
                                               "users": torch.from_numpy(users[:5])})
    with pytest.raises(DatasetError, match=r"test.safetensors: expected tensors 'x' and 'y' "
                                           r"\(and 'users', train only\)"):
        load_dataset("folder", tmp_path)
    save_state(tmp_path / "test.safetensors", {"x": x[:5], "y": torch.from_numpy(labels[:5])})
    assert torch.equal(load_dataset("folder", tmp_path).users, torch.from_numpy(users))


SENSORS_NATURAL = """\
seed = 0
rounds = 2
eval_interval = 2
checkpoint_interval = 2

[data]
dataset = "sensorkit.data:SENSORS"
kind = "natural"
num_clients = 100
min_size = 10
test_fraction = 0.25
num_new_clients = 2

[model]
name = "sensorkit.nets:SensorNet"

[algorithm]
name = "fedper"

[training]
clients_per_round = 4
epochs = 1
batch_size = 32
lr = 0.1
"""


@pytest.fixture
def sensorkit(monkeypatch):
    """The docs' sensor example package on the path (its 12 users have their own sensors)."""
    monkeypatch.syspath_prepend(str(EXT_PKG))


def test_a_simulation_on_the_sensor_users_reports_per_user_results(sensorkit, tmp_path):
    config = SimConfig.from_toml(SENSORS_NATURAL)
    result = Simulation(config, tmp_path / "run", progress=False).run()
    table = (tmp_path / "run" / "partition.txt").read_text()
    assert table.startswith("natural partition: 11 of the dataset's 12 users are the clients; "
                            "1 dropped (fewer than min_size = 10 rows)")
    new = set(RunDir(tmp_path / "run").load_partition().new_clients)
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text()
            .splitlines()]
    assert len(new) == 2 and all(not new & set(r["clients"]) for r in rows)  # never trained
    per_user = result.final["clients"]["per_client"]
    assert len(per_user) == 9 and len(result.final["new_clients"]["per_client"]) == 2
    assert (tmp_path / "run" / "plots" / "partition.png").is_file()
    assert (f"{table.splitlines()[0]}; `partition.txt` names each client's user."
            in (tmp_path / "run" / "report.md").read_text())


def test_a_round_sample_larger_than_the_users_is_refused_before_writing(sensorkit, tmp_path):
    config = SimConfig.from_toml(SENSORS_NATURAL.replace("clients_per_round = 4",
                                                         "clients_per_round = 10"))
    with pytest.raises(ConfigError, match=r"^training.clients_per_round: cannot sample 10 of 9 "
                                          r"clients per round \(natural partition: 11 of"):
        Simulation(config, tmp_path / "run", progress=False)
    assert not (tmp_path / "run").exists()


def test_natural_on_a_dataset_without_users_leaves_no_run_folder(tmp_path):
    config = SimConfig.from_toml(SENSORS_NATURAL.replace('"sensorkit.data:SENSORS"',
                                                         '"synthetic"')
                                 .replace('"sensorkit.nets:SensorNet"', '"twonn"'))
    with pytest.raises(ConfigError, match='^data.kind: "natural" needs a dataset'):
        Simulation(config, tmp_path / "run", progress=False)
    assert not (tmp_path / "run").exists()
