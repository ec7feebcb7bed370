"""A natural deal splits each user's rows by the seed and that user's id alone.

Before, one random stream ran over all kept rows: dropping one user, or another min_size or
cap, gave every other user other own test rows, so runs could not be compared user by user.
"""

import numpy as np
import pytest
from test_per_user_data import NATURAL, write_logs

from pflkit.sdk.data import Dataset
from pflkit.sdk.data.federation import (
    Partition,
    PartitionConfig,
    build_federation,
    deal,
    partition_table,
)
from pflkit.sdk.run_config import ConfigError, SimConfig
from pflkit.sdk.rundir import RunDir
from pflkit.sdk.tensorio import load_state, save_state
from pflkit.server.simulator import Simulation


def logs(rows: int = 3000, users: int = 30) -> tuple[np.ndarray, np.ndarray]:
    """Shuffled rows of users with uneven sizes and sparse, negative and huge ids."""
    rng = np.random.default_rng(3)
    ids = np.array([-5, 0, 2**62, *(17 * k + 3 for k in range(users - 3))])
    return ids[rng.choice(users, size=rows, p=rng.dirichlet(np.ones(users)))], \
        rng.integers(0, 4, size=rows)


def natural(**kw) -> PartitionConfig:
    return PartitionConfig("natural", **{"num_clients": 1000, "min_size": 1,
                                         "test_fraction": 0.3, **kw})


def splits(part: Partition, rows: np.ndarray) -> dict[int, tuple[list[int], list[int]]]:
    """user id -> (train rows, test rows), as rows of the full dataset (``rows``)."""
    return {int(u): (rows[part.train[c]].tolist(), rows[part.test[c]].tolist())
            for c, u in enumerate(part.users.ids)}


def test_dropping_a_user_leaves_every_other_users_split_as_it_was():
    users, labels = logs()
    every = np.arange(len(users))
    full = splits(deal(labels, 4, natural(), 0, users), every)
    for gone in (-5, 2**62, 20):
        kept = users != gone
        fewer = splits(deal(labels[kept], 4, natural(), 0, users[kept]), every[kept])
        assert fewer == {u: s for u, s in full.items() if u != gone}


def test_min_size_and_the_cap_change_who_is_kept_not_a_kept_users_split():
    users, labels = logs()
    every = np.arange(len(users))
    full = splits(deal(labels, 4, natural(), 0, users), every)
    for config in (natural(min_size=120), natural(num_clients=7)):
        part = splits(deal(labels, 4, config, 0, users), every)
        assert 0 < len(part) < len(full)
        assert part == {u: full[u] for u in part}


def held_out(part: Partition) -> set[int]:
    return {int(part.users.ids[c]) for c in part.new_clients}


def test_the_cap_and_the_held_out_users_do_not_reshuffle_when_a_user_leaves():
    """Both were draws over client indices: one user fewer, another random set of users."""
    users, labels = logs()
    config = natural(num_clients=12, num_new_clients=4)
    full = deal(labels, 4, config, 0, users)
    kept, new = set(full.users.ids.tolist()), held_out(full)
    outside = next(u for u in set(users.tolist()) if u not in kept)
    rest = users != outside
    fewer = deal(labels[rest], 4, config, 0, users[rest])
    assert set(fewer.users.ids.tolist()) == kept and held_out(fewer) == new
    trained = next(u for u in kept if u not in new)
    rest = users != trained
    fewer = deal(labels[rest], 4, config, 0, users[rest])
    assert len(kept - set(fewer.users.ids.tolist())) == 1  # only the user that left
    assert held_out(fewer) == new


def test_a_users_noisy_labels_do_not_change_when_another_user_leaves():
    users, labels = logs()
    config = natural(noise="symmetric", noise_rate=0.4)
    every = np.arange(len(users))
    full = deal(labels, 4, config, 0, users)
    noisy = {int(u): full.labels[c].tolist() for c, u in enumerate(full.users.ids)}
    rest = users != -5
    fewer = deal(labels[rest], 4, config, 0, users[rest])
    assert {int(u): fewer.labels[c].tolist() for c, u in enumerate(fewer.users.ids)} == \
        {u: n for u, n in noisy.items() if u != -5}
    assert splits(fewer, every[rest]) == {u: s for u, s in splits(full, every).items() if u != -5}


def test_other_users_rows_moving_around_leave_a_users_split_as_it_was():
    """A log re-exported user by user (each user's own rows in the order they were)."""
    users, labels = logs()
    moved = np.argsort(users, kind="stable")
    before = splits(deal(labels, 4, natural(), 0, users), np.arange(len(users)))
    assert splits(deal(labels[moved], 4, natural(), 0, users[moved]), moved) == before


def test_the_seed_fixes_the_split_and_another_seed_draws_another():
    users, labels = logs()
    every = np.arange(len(users))
    a = splits(deal(labels, 4, natural(), 0, users), every)
    assert splits(deal(labels, 4, natural(), 0, users), every) == a
    b = splits(deal(labels, 4, natural(), 1, users), every)
    assert b.keys() == a.keys()
    assert sum(a[u] != b[u] for u in a) >= len(a) - 1  # a user of 2 rows may draw the same


def test_each_row_of_a_user_is_test_as_often_as_any_other():
    """Over 2000 seeds each of a 4-row user's rows is its one test row about 500 times."""
    users, labels = np.array([9] * 4 + [10] * 3), np.zeros(7, dtype=np.int64)
    hits = np.zeros(4)
    for seed in range(2000):
        hits[deal(labels, 1, natural(test_fraction=0.25), seed, users).test[0]] += 1
    assert hits.sum() == 2000
    assert np.all(np.abs(hits - 500) < 4 * np.sqrt(2000 * 0.25 * 0.75))  # 4 sigma: 77


def older_deal(run: RunDir, swap: bool) -> None:
    """Store the run's deal as pflkit stored it before the per-user draws: no ``users.draws``
    key, and (``swap``) user 0's own test rows drawn otherwise (one test row a train row)."""
    state = load_state(run.partition_file)
    state.pop("users.draws", None)
    if swap:
        train, test = state["train"], state["test"]
        train[0], test[0] = test[0].clone(), train[0].clone()
    save_state(run.partition_file, state)


def test_a_run_dealt_before_the_per_user_split_is_refused_on_resume_in_one_line(tmp_path):
    write_logs(tmp_path)
    config = SimConfig.from_toml(NATURAL.format(root=tmp_path).replace("rounds = 1",
                                                                         "rounds = 3"))
    sim = Simulation(config, tmp_path / "run", progress=False)
    sim.run_round()
    sim.close()
    run = RunDir(tmp_path / "run")
    older_deal(run, swap=True)
    stored = run.partition_file.read_bytes()
    with pytest.raises(ConfigError, match=r"^--resume .*run: the data deals the clients other "
                       r"rows than when the run began \(an older pflkit dealt it, whose draws "
                       r"for a user hung on the other users; or did the dataset change\?\)"
                       ) as err:
        Simulation.resume(tmp_path / "run", progress=False)
    assert "\n" not in str(err.value)
    assert run.partition_file.read_bytes() == stored  # nothing re-dealt


def test_an_older_deal_without_own_test_rows_resumes_as_it_was(tmp_path):
    """test_fraction = 0, no cap reached, none held out: no draw, the older deal is this."""
    users, labels = logs()
    part = deal(labels, 4, natural(test_fraction=0.0), 0, users)
    run = RunDir(tmp_path)
    run.save_partition(part)
    older_deal(run, swap=False)
    run.refuse_another_deal(part)
    with pytest.raises(ConfigError, match=r"an older pflkit dealt it"):
        run.refuse_another_deal(deal(labels, 4, natural(test_fraction=0.0), 0,
                                     np.where(users == 0, 1, users)))


def test_the_table_column_of_user_ids_fits_the_longest_id():
    """Ids past 12 digits (2**62: 19) pushed their rows' counts out of the header's columns."""
    users, labels = logs()
    data = Dataset.from_raw("logs", "abcd", (np.zeros((len(users), 2), np.float32), labels),
                            (np.zeros((1, 2), np.float32), labels[:1]), users=users)
    lines = partition_table(build_federation(data, natural(), 0), max_rows=40).splitlines()
    rows = [line for line in lines[2:] if line[:5].strip().isdigit()]
    assert str(2**62) in "".join(rows)
    assert {len(line) for line in rows} == {len(lines[1])}  # every row under its header
