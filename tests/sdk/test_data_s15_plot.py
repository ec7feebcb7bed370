"""The partition table and plot every run writes, at the sizes a federation may have.

Before: the plot made one bar call per class, a patch per class and client: 30 s at 2,000
classes and 10 clients on the shared 2-core machine (a dataset may have 100,000 classes).
Now the segments there are form one collection. Both also counted every client's classes to
show the first 20 or 200 clients.
"""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import numpy as np
import pytest
from matplotlib.figure import Figure

from pflkit.sdk.data import (
    Dataset,
    PartitionConfig,
    build_federation,
    partition_table,
    plot_partition,
)


@pytest.fixture
def drawn(monkeypatch) -> list[Figure]:
    """The figures plot_partition saves, kept for a look at what they hold."""
    figures: list[Figure] = []
    save = Figure.savefig

    def keeping(fig: Figure, path: Path, *args, **kwargs) -> None:
        save(fig, path, *args, **kwargs)
        figures.append(fig)

    monkeypatch.setattr(Figure, "savefig", keeping)
    return figures


def test_many_classes_are_one_collection_whose_stacks_are_the_clients_totals(tmp_path, drawn):
    classes = 3000
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(2 * classes, 2)).astype(np.float32), np.arange(2 * classes) % classes
    data = Dataset.from_raw("d", [f"c{k}" for k in range(classes)], (x, y), (x[:4], y[:4]))
    federation = build_federation(data, PartitionConfig("iid", num_clients=3), seed=0)
    plot_partition(federation, tmp_path / "partition.png")
    ax = drawn[0].axes[0]
    assert len(ax.patches) == 0 and len(ax.collections) == 1  # not a patch per class and client
    hist = federation.class_histogram()
    segments = [path.vertices for path in ax.collections[0].get_paths()]
    assert len(segments) == np.count_nonzero(hist)
    tops = {round(float(s[:, 0].mean())): float(s[:, 1].max()) for s in segments}
    assert tops == {client: float(rows) for client, rows in enumerate(hist.sum(axis=1))}


def test_ten_classes_keep_their_legend_of_class_names(tmp_path, drawn):
    rng = np.random.default_rng(1)
    x, y = rng.normal(size=(60, 2)).astype(np.float32), np.arange(60) % 10
    names = [f"class {k}" for k in range(10)]
    data = Dataset.from_raw("d", names, (x, y), (x[:4], y[:4]))
    plot_partition(build_federation(data, PartitionConfig("iid", 4), seed=0), tmp_path / "p.png")
    assert [t.get_text() for t in drawn[0].axes[0].get_legend().get_texts()] == names


def test_the_table_and_the_plot_count_only_the_clients_they_show(tmp_path):
    """Both built every client's row first: 2,000 clients of 5,000 classes took 80 MB here,
    100,000 users of 10,000 classes would take 8 GB (numpy's allocations are traced)."""
    rng = np.random.default_rng(2)
    x, y = rng.normal(size=(4000, 2)).astype(np.float32), rng.integers(0, 5000, 4000)
    data = Dataset.from_raw("d", [str(k) for k in range(5000)], (x, y), (x[:4], y[:4]))
    federation = build_federation(data, PartitionConfig("iid", num_clients=2000), seed=0)
    tracemalloc.start()
    try:
        table = partition_table(federation, max_rows=5)
        plot_partition(federation, tmp_path / "p.png", max_bars=5)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 20 * 2**20, peak
    assert table.splitlines()[-1] == "... 1995 more clients"
    assert len(table.splitlines()) == 1 + 5 + 1
