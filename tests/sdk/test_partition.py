import numpy as np
import pytest

from pflkit.sdk.data import partition
from pflkit.sdk.data.noise import apply_label_noise, transition_matrix
from pflkit.sdk.seeding import numpy_rng


def labels(n=3000, classes=10, seed=0):
    return numpy_rng(seed, "labels").integers(0, classes, size=n)


def assert_exact_cover(parts, n):
    joined = np.concatenate(parts)
    assert len(joined) == n
    assert np.array_equal(np.sort(joined), np.arange(n))


@pytest.mark.parametrize(
    "make",
    [
        lambda y, rng: partition.iid(y, 17, rng),
        lambda y, rng: partition.shards(y, 20, rng, 2),
        lambda y, rng: partition.dirichlet(y, 15, 0.3, rng, min_size=5),
    ],
    ids=["iid", "shards", "dirichlet"],
)
def test_every_sample_is_assigned_exactly_once(make):
    y = labels()
    assert_exact_cover(make(y, numpy_rng(1, "p")), len(y))


def test_pathological_shards_give_at_most_two_classes_per_client():
    y = labels(6000)
    parts = partition.shards(y, 50, numpy_rng(0, "s"), shards_per_client=2)
    assert max(len(np.unique(y[p])) for p in parts) <= 2


def test_small_alpha_gives_skewed_clients_and_large_alpha_balanced_ones():
    y = labels(10000)

    def mean_top_class_share(alpha):
        parts = partition.dirichlet(y, 20, alpha, numpy_rng(2, alpha), min_size=5)
        return np.mean([np.bincount(y[p], minlength=10).max() / len(p) for p in parts])

    assert mean_top_class_share(0.05) > 0.6
    assert mean_top_class_share(100.0) < 0.2


def test_dirichlet_respects_min_size():
    y = labels(3000)
    parts = partition.dirichlet(y, 20, 0.3, numpy_rng(3, "d"), min_size=40)
    assert min(len(p) for p in parts) >= 40


def test_same_seed_same_partition_other_seed_other_partition():
    y = labels()
    a = partition.dirichlet(y, 10, 0.5, numpy_rng(7, "d"))
    b = partition.dirichlet(y, 10, 0.5, numpy_rng(7, "d"))
    c = partition.dirichlet(y, 10, 0.5, numpy_rng(8, "d"))
    assert all(np.array_equal(p, q) for p, q in zip(a, b, strict=True))
    assert not all(np.array_equal(p, q) for p, q in zip(a, c, strict=True))


def test_bad_partition_requests_are_clear_errors():
    y = labels(100)
    with pytest.raises(partition.PartitionError, match="alpha"):
        partition.dirichlet(y, 5, 0.0, numpy_rng(0))
    with pytest.raises(partition.PartitionError, match="min_size"):
        partition.dirichlet(y, 50, 1.0, numpy_rng(0), min_size=10)
    with pytest.raises(partition.PartitionError, match="clients"):
        partition.iid(y, 0, numpy_rng(0))


def test_new_client_split_and_client_train_test_split():
    train, new = partition.split_new_clients(100, 50, numpy_rng(0, "n"))
    assert len(train) == len(new) == 50 and not set(train) & set(new)
    tr, te = partition.train_test_split(np.arange(100, 200), 0.2, numpy_rng(0, "t"))
    assert len(te) == 20 and len(tr) == 80
    assert np.array_equal(np.sort(np.concatenate([tr, te])), np.arange(100, 200))


def test_transition_matrices_match_the_paper():
    pair = transition_matrix("pair", 0.4, 4)
    assert np.allclose(pair[0], [0.6, 0.4, 0, 0]) and np.allclose(pair[3], [0.4, 0, 0, 0.6])
    sym = transition_matrix("symmetric", 0.6, 4)
    assert np.allclose(sym[1], [0.2, 0.4, 0.2, 0.2])
    assert np.allclose(pair.sum(1), 1) and np.allclose(sym.sum(1), 1)


@pytest.mark.parametrize("kind,eps", [("pair", 0.4), ("symmetric", 0.2)])
def test_label_noise_flips_the_expected_share(kind, eps):
    y = labels(20000)
    noisy = apply_label_noise(y, kind, eps, 10, numpy_rng(0, "noise"))
    assert abs((noisy != y).mean() - eps) < 0.02
    if kind == "pair":
        flipped = noisy != y
        assert np.all(noisy[flipped] == (y[flipped] + 1) % 10)


@pytest.mark.parametrize("rows,fraction,train", [(3, 0.9, 1), (1, 0.5, 1), (2, 0.8, 1),
                                                 (10, 0.2, 8), (0, 0.5, 0)])
def test_a_client_keeps_a_train_row_whatever_its_test_fraction(rows, fraction, train):
    """A fraction rounding to all of a small client's rows left it nothing to train on."""
    tr, te = partition.train_test_split(np.arange(rows), fraction, numpy_rng(0, "t"))
    assert len(tr) == train and len(tr) + len(te) == rows
