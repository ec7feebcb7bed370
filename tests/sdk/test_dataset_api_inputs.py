"""A user's own arrays through ``Dataset.from_users`` and ``Dataset.from_raw``: refusals.

Before: float labels were truncated (0.7 and 1.7 trained as classes 0 and 1), text labels and
object arrays raised torch's TypeError, a bool or uint64 user column made two users or
negative ids, rows that did not pair up raised bare ValueError/IndexError/RuntimeError, and an
empty first user given as ``[]`` made the next user's error read "the first user's ()".
A NaN std, duplicate class names or inputs of shape (0,) passed every check, and a float64
input beyond float32 became Inf, reported as "NaN or Inf" that the user's rows did not hold.
Each refusal is now one ``DatasetError`` line naming the dataset, the user or split, and what
is wrong.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from pflkit.sdk.data import Dataset, DatasetError, DatasetSource, Preprocessing, Standardize

X = np.zeros((2, 3), np.float32)
TEST = (X, np.array([0, 1]))


def refusal(build) -> str:
    """The one line that ``build()`` is refused with."""
    with pytest.raises(DatasetError) as caught:
        build()
    message = str(caught.value)
    assert "\n" not in message, message
    return message


def one_user(x: object, y: object, user: int = 1) -> Dataset:
    return Dataset.from_users("d", "ab", {user: (x, y)}, TEST)


FLOAT_LABELS = {  # how the labels were given -> what the line says
    "numpy 0.7, 1.7": (lambda: one_user(X, np.array([0.7, 1.7])),
                       "user 1's labels y are torch.float64, not integers (the first not "
                       "whole, 0.7 at row 0, is no class)"),
    "second row": (lambda: one_user(X, np.array([1.0, 0.25]), user=-3),
                   "user -3's labels y are torch.float64, not integers (the first not whole, "
                   "0.25 at row 1, is no class)"),
    "whole floats": (lambda: one_user(X, np.array([0.0, 1.0])),
                     "user 1's labels y are torch.float64, not integers (all whole: convert "
                     "with y.astype(int) or y.long())"),
    "NaN": (lambda: one_user(X, np.array([0, np.nan])), "the first not whole, nan at row 1"),
    "torch float32": (lambda: Dataset.from_raw("d", "ab", (X, torch.tensor([0.2, 1.0])), TEST),
                      "the train split's labels y are torch.float32, not integers (the first "
                      "not whole, 0.2 at row 0, is no class)"),
    "a list, test split": (lambda: Dataset.from_raw("d", "ab", TEST, (X, [1, 0.5])),
                           "the test split's labels y are torch.float64, not integers (the "
                           "first not whole, 0.5 at row 1, is no class)"),
}


@pytest.mark.parametrize("case", FLOAT_LABELS)
def test_float_labels_are_refused_never_truncated(case: str):
    build, says = FLOAT_LABELS[case]
    message = refusal(build)
    assert message.startswith("dataset 'd': ") and says in message, message


class Trap:
    """An object a careless conversion would ask for a number (or unpickle): it must not be."""

    asked = False

    def __float__(self) -> float:
        Trap.asked = True
        return 0.0

    __index__ = __int__ = __float__  # type: ignore[assignment]


NOT_NUMBERS = {  # (x, y) of user 1 -> what the line says
    "text labels": ((X, np.array(["cat", "dog"])), "user 1's y holds <U3 values, not real "
                                                   "numbers (ints, floats or bools)"),
    "label names in a list": ((X, ["cat", "dog"]), "user 1's y holds <U3 values"),
    "object x": ((np.array([[1, 2, 3]] * 2, dtype=object), [0, 1]),
                 "user 1's x holds object values, not real numbers"),
    "objects in a list": (([[Trap()] * 3] * 2, [0, 1]), "user 1's x holds object values"),
    "None labels": ((X, None), "user 1's y holds object values"),
    "dates": ((np.zeros((2, 3), "datetime64[s]"), [0, 1]), "user 1's x holds datetime64[s]"),
    "complex x": ((X.astype(np.complex64), [0, 1]), "user 1's x holds complex64 values"),
    "complex torch x": ((torch.zeros(2, 3, dtype=torch.complex64), [0, 1]),
                        "user 1's x holds torch.complex64 values, not real numbers"),
    "bytes": ((b"abcdef", [0, 1]), "user 1's x holds |S6 values"),
    "ragged rows": (([[1, 2, 3], [4, 5]], [0, 1]), "user 1's x is not an array of numbers "
                                                   "(setting an array element with a sequence"),
}


@pytest.mark.parametrize("case", NOT_NUMBERS)
def test_what_is_not_numbers_is_one_line_and_never_converted(case: str):
    (x, y), says = NOT_NUMBERS[case]
    Trap.asked = False
    message = refusal(lambda: one_user(x, y))
    assert message.startswith("dataset 'd': ") and says in message, message
    assert not Trap.asked


@pytest.mark.parametrize(("users", "says"), [
    (np.array([True, False]), "dataset 'd': train users must be integer user ids, got bool "
                              "(True and False would be two users)"),
    (np.array([5, 2**64 - 1], np.uint64), "dataset 'd': user id 18446744073709551615 at row 1 "
                                          "is beyond int64 (user ids are -2**63..2**63-1)"),
    (np.array(["u1", "u2"]), "dataset 'd': users holds <U2 values, not real numbers (ints, "
                             "floats or bools): number named users first, e.g. "
                             "np.unique(names, return_inverse=True)[1]"),
    (np.array([[1], [2]]), "dataset 'd': users must be int64 (2,), one per train row, got "
                           "torch.int64 (2, 1)"),
])
def test_a_user_column_that_would_deal_wrong_users_is_refused(users: np.ndarray, says: str):
    assert refusal(lambda: Dataset.from_raw("d", "ab", TEST, TEST, users=users)) == says


def test_uint64_user_ids_within_int64_keep_their_values():
    users = np.array([2**63 - 1, 7], np.uint64)
    assert Dataset.from_raw("d", "ab", TEST, TEST, users=users).users.tolist() == \
        [2**63 - 1, 7]


def test_uint64_labels_beyond_int64_are_refused_not_wrapped():
    y = np.array([1, 2**64 - 1], np.uint64)
    assert refusal(lambda: one_user(X, y)) == (
        "dataset 'd': user 1's label 18446744073709551615 at row 1 is beyond int64 (labels "
        "are 0..C-1)")


def test_an_empty_first_user_given_as_a_list_is_no_user():
    per_user = {4: ([], []), 2: TEST, 9: (np.zeros((0,)), np.zeros((0,), np.int64))}
    data = Dataset.from_users("d", "ab", per_user, TEST)
    assert data.users.tolist() == [2, 2]
    per_user[5] = (np.zeros((2, 4), np.float32), [0, 1])
    assert refusal(lambda: Dataset.from_users("d", "ab", per_user, TEST)) == (
        "dataset 'd': user 5's inputs are (4,), the first user's (3,)")
    empty = {4: ([], []), 9: (np.zeros((0, 3)), [])}
    assert refusal(lambda: Dataset.from_users("d", "ab", empty, TEST)) == (
        "dataset 'd': from_users: no user has rows (the train split would be empty)")


ROWS_THAT_DO_NOT_PAIR = {  # a call -> its line
    "x and y lengths, train": (lambda: Dataset.from_raw("d", "ab", (X, [0, 1, 1]), TEST),
                               "dataset 'd': the train split has x (2, 3) and y (3,): one label "
                               "per row of x"),
    "x and y lengths, test": (lambda: Dataset.from_raw("d", "ab", TEST, (X, [0])),
                              "dataset 'd': the test split has x (2, 3) and y (1,)"),
    "x one value per row": (lambda: Dataset.from_raw("d", "ab", (np.zeros(2), [0, 1]), TEST),
                            "dataset 'd': the train split has x (2,) and y (2,): one label per "
                            "row of x, and x (N, ...) has at least 2 axes (a column of N values "
                            "is (N, 1))"),
    "y a column": (lambda: one_user(X, [[0], [1]]),
                   "dataset 'd': user 1 has x (2, 3) and y (2, 1)"),
    "x one user's row": (lambda: one_user([1.0, 2.0, 3.0], [0]),
                         "dataset 'd': user 1 has x (3,) and y (1,)"),
    "not a pair": (lambda: Dataset.from_users("d", "ab", {1: X}, TEST),
                   "dataset 'd': user 1 is a ndarray, not a pair (x, y)"),
    "x, y and more": (lambda: Dataset.from_users("d", "ab", {1: (X, [0, 1], "w")}, TEST),
                      "dataset 'd': user 1 is a tuple, not a pair (x, y)"),
    "test not a pair": (lambda: Dataset.from_raw("d", "ab", TEST, X),
                        "dataset 'd': the test split is a ndarray, not a pair (x, y)"),
    "users as a list of pairs": (lambda: Dataset.from_users("d", "ab", [TEST], TEST),
                                 "dataset 'd': from_users needs at least one user, as a dict "
                                 "{user id: (x, y)}, got list"),
    "standardize of other width": (
        lambda: Dataset.from_raw("d", "ab", TEST, TEST, Standardize((4,), (0.0,) * 4,
                                                                    (1.0,) * 4)),
        "dataset 'd': the train split's x is (2, 3), the preprocessing takes (N, *(4,))"),
    "test of other width": (lambda: Dataset.from_raw("d", "ab", TEST, (X[:, :2], [0, 1])),
                            "dataset 'd': the test split's x is (2, 2), the preprocessing "
                            "takes (N, *(3,))"),
    "beyond float32": (lambda: one_user(np.array([[0.0, 1.0, 2.0], [0.0, -1e300, 0.0]]), [0, 1]),
                       "dataset 'd': user 1's x holds -1e+300 at row 1, beyond float32 (inputs "
                       "are float32: |x| <= 3.4e38)"),
    "images given as rows": (
        lambda: Dataset.from_raw("d", "ab", TEST, TEST,
                                 Preprocessing(1, (4, 4), (0.5,), (0.5,))),
        "dataset 'd': the train split's x is (2, 3), the preprocessing takes (N, 1, H, W)"),
}


@pytest.mark.parametrize("case", ROWS_THAT_DO_NOT_PAIR)
def test_rows_that_do_not_pair_up_are_one_line_naming_where(case: str):
    build, says = ROWS_THAT_DO_NOT_PAIR[case]
    message = refusal(build)
    assert message.startswith(says), message


NUMBERS_OF_THE_SPEC = {  # a spec's numbers from outside -> the start of its line
    "std NaN": (lambda: Standardize((3,), (0.0,) * 3, (float("nan"),) * 3),
                "Standardize: every mean and std must be finite, every std > 0, got mean "
                "(0.0, 0.0, 0.0), std (nan, nan, nan)"),
    "mean inf": (lambda: Standardize((1,), (float("inf"),), (1.0,)),
                 "Standardize: every mean and std must be finite"),
    "fit on a NaN row": (lambda: Standardize.fit(np.array([[1.0, np.nan], [2.0, 3.0]])),
                         "Standardize: every mean and std must be finite, every std > 0, got "
                         "mean (1.5, nan)"),
    "image std 0": (lambda: Preprocessing(1, (8, 8), (0.5,), (0.0,)),
                    "Preprocessing: channels and size >= 1, one finite mean and std > 0 per "
                    "channel, a finite pixel_scale > 0; got Preprocessing(channels=1"),
    "a mean for 1 of 3 channels": (lambda: Preprocessing(3, (8, 8), (0.5,), (0.25,)),
                                   "Preprocessing: channels and size >= 1"),
    "pixel_scale NaN": (lambda: Preprocessing(1, (8, 8), (0.5,), (0.25,), float("nan")),
                        "Preprocessing: channels and size >= 1"),
    "size 0": (lambda: Preprocessing(1, (0, 8), (0.5,), (0.25,)),
               "Preprocessing: channels and size >= 1"),
}


@pytest.mark.parametrize("case", NUMBERS_OF_THE_SPEC)
def test_a_preprocessing_that_would_make_every_input_nan_is_refused(case: str):
    build, says = NUMBERS_OF_THE_SPEC[case]
    assert refusal(build).startswith(says)


@pytest.mark.parametrize(("classes", "says"), [
    (["cat", "cat"], "dataset 'd': class 'cat' is named twice or is no text (one distinct "
                     "name per class)"),
    ([0, 1], "dataset 'd': class 0 is named twice or is no text (one distinct name per class)"),
])
def test_class_names_are_distinct_text(classes: list, says: str):
    source = DatasetSource(lambda root, seed: Dataset.from_raw("d", classes, TEST, TEST))
    assert refusal(lambda: source.load_checked("d", None, None, 0)) == says


@pytest.mark.parametrize(("x", "shape"), [(np.zeros((2, 0)), "(0,)"),
                                          (np.zeros((2, 3, 0, 4)), "(3, 0, 4)"),
                                          (np.zeros((2,) + (1,) * 9), str((1,) * 9))])
def test_inputs_no_device_takes_are_refused(x: np.ndarray, shape: str):
    source = DatasetSource(lambda root, seed: Dataset.from_raw("d", "ab", (x, [0, 1]),
                                                               (x, [0, 1])))
    assert refusal(lambda: source.load_checked("d", None, None, 0)) == (
        f"dataset 'd': inputs are {shape}: 1 to 8 axes, each 1 to 2147483647 long, as devices "
        "take them")


def test_save_client_data_refuses_float_labels_never_truncates(tmp_path):
    """``save_client_data`` wrote labels 0.7 and 1.7 as classes 0 and 1."""
    from pflkit.sdk.client import save_client_data
    from pflkit.sdk.data.tensors import LabeledTensors

    path = tmp_path / "data.safetensors"
    with pytest.raises(ValueError, match=r"^the device's data's labels y are torch.float64, "
                       r"not integers \(the first not whole, 0.7 at row 0, is no class\)$"):
        save_client_data(path, LabeledTensors(torch.zeros(2, 3), torch.tensor([0.7, 1.7],
                                                                            dtype=torch.float64)))
    assert not path.exists()
    save_client_data(path, LabeledTensors(torch.zeros(2, 3), torch.tensor([0, 1]).to(torch.uint8)))
    assert path.exists()
