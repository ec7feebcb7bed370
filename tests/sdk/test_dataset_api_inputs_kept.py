"""A user's own arrays through ``Dataset.from_users`` / ``from_raw``: the numbers are kept.

Arrays as exports and notebooks leave them (lists, memoryviews, strided, reversed, big-endian
and read-only numpy arrays, pandas frames, float16/float64 inputs, int8/uint8/bool labels)
become the same numbers: x as float32, y as int64. Before, a memoryview, a reversed
(``x[::-1]``) or big-endian array raised torch's ValueError, and a list for ``from_raw``'s x
an AttributeError.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from pflkit.sdk.data import Dataset, DatasetSource, Standardize

VALUES = np.arange(12, dtype=np.float32).reshape(4, 3) / 4  # exact in float16 too
LABELS = np.array([0, 1, 1, 0])
TEST = (VALUES, LABELS)


def read_only(array: np.ndarray) -> np.ndarray:
    array = array.copy()
    array.flags.writeable = False
    return array


INPUTS = {  # how a user hands over VALUES
    "list": lambda: VALUES.tolist(),
    "memoryview": lambda: memoryview(VALUES),
    "every other column": lambda: np.repeat(VALUES, 2, axis=1)[:, ::2],
    "reversed view": lambda: VALUES[::-1].copy()[::-1],
    "big-endian": lambda: VALUES.astype(">f4"),
    "read-only": lambda: read_only(VALUES),
    "float16": lambda: VALUES.astype(np.float16),
    "float64": lambda: VALUES.astype(np.float64),
    "int rows": lambda: (VALUES * 4).astype(np.int16),
    "torch bfloat16": lambda: torch.from_numpy(VALUES).to(torch.bfloat16),
    "a tensor that tracks gradients": lambda: torch.from_numpy(VALUES).requires_grad_(),
}


@pytest.mark.parametrize("case", INPUTS)
def test_inputs_keep_their_numbers_in_both_calls(case: str):
    expected = torch.from_numpy(VALUES * 4 if case == "int rows" else VALUES)
    for data in (Dataset.from_raw("d", "ab", (INPUTS[case](), LABELS), TEST),
                 Dataset.from_users("d", "ab", {3: (INPUTS[case](), LABELS)}, TEST)):
        assert data.train.x.dtype == torch.float32 and not data.train.x.requires_grad
        assert torch.equal(data.train.x, expected)


@pytest.mark.parametrize("labels", [
    LABELS.astype(np.int8), LABELS.astype(np.uint8), LABELS.astype(">i8"),
    LABELS.astype(np.uint64), LABELS.tolist(), LABELS == 1, memoryview(LABELS),
    torch.from_numpy(LABELS).to(torch.int32),
])
def test_integer_labels_of_any_width_keep_their_values(labels: object):
    data = Dataset.from_users("d", "ab", {0: (VALUES, labels)}, TEST)
    assert data.train.y.dtype == torch.int64 and data.train.y.tolist() == [0, 1, 1, 0]


def test_a_users_columns_of_a_pandas_frame_are_its_rows():
    pandas = pytest.importorskip("pandas")
    frame = pandas.DataFrame({"a": VALUES[:, 0], "b": VALUES[:, 1], "c": VALUES[:, 2],
                              "label": pandas.Series(LABELS, dtype="int8"),
                              "user": [10, 10, 11, 12]})
    per_user = {user: (rows[["a", "b", "c"]], rows["label"]) for user, rows in
                frame.groupby("user")}
    data = Dataset.from_users("d", "ab", per_user, TEST)
    assert data.users.tolist() == [10, 10, 11, 12]
    assert torch.equal(data.train.x, torch.from_numpy(VALUES))
    assert data.train.y.tolist() == LABELS.tolist()
    whole = Dataset.from_raw("d", "ab", (frame[["a", "b", "c"]], frame["label"]), TEST,
                             users=frame["user"])
    assert whole.users.tolist() == [10, 10, 11, 12]


def test_a_dataset_of_raw_lists_passes_the_contract_check():
    source = DatasetSource(lambda root, seed: Dataset.from_raw(
        "lists", ["a", "b"], (VALUES.tolist(), LABELS.tolist()), (VALUES.tolist(), [1] * 4),
        users=[7, 7, 8, 9]))
    data = source.load_checked("lists", None, None, 0)
    assert data.spec.input_shape == (3,) and data.users.tolist() == [7, 7, 8, 9]


@pytest.mark.parametrize("raw", [VALUES, VALUES.tolist(), torch.from_numpy(VALUES)])
def test_standardize_fits_numpy_arrays_and_lists_as_tensors(raw: object):
    fitted = Standardize.fit(raw)
    assert fitted.input_shape == (3,)
    assert fitted.mean == pytest.approx(VALUES.mean(axis=0).tolist())
    assert fitted.std == pytest.approx(VALUES.std(axis=0).tolist())


def test_a_split_without_rows_may_give_its_labels_as_an_empty_list():
    data = Dataset.from_raw("d", "ab", TEST, (np.zeros((0, 3), np.float32), []))
    assert data.test.y.dtype == torch.int64 and len(data.test) == 0
