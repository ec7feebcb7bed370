"""Class names a user brings: each line one label's name, one name per class, any count.

Before the fixes a blank line in ``classes.txt`` was skipped (every later name moved onto the
label before its own), 'café' typed and pasted (NFC and NFD) were two classes that print
alike, checking the names for repeats scanned all names before each (11 s at 30,000
classes, 2 minutes at the documented 100,000), and a spec told without the data, the one
pfl-server builds its model from, was not checked at all.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from pflkit.sdk.data import Dataset, DatasetError, dataset_spec, load_dataset
from pflkit.sdk.data.spec import check_dataset

NFC, NFD = "caf\u00e9", "cafe\u0301"  # one name, as typed and as pasted from a web page


def folder(root: Path, classes: str) -> Path:
    """A folder dataset of 6 rows with labels 0..2 and ``classes`` as its classes.txt."""
    x, y = np.zeros((6, 2), dtype=np.float32), np.arange(6) % 3
    for split in ("train", "test"):
        np.save(root / f"{split}_x.npy", x)
        np.save(root / f"{split}_y.npy", y)
    (root / "classes.txt").write_text(classes, encoding="utf-8")
    return root


def refusal(root: Path) -> str:
    with pytest.raises(DatasetError) as refused:
        load_dataset("folder", root)
    return str(refused.value)


def test_a_blank_line_between_class_names_is_refused_not_skipped(tmp_path: Path):
    """'cat, (blank), dog, bird' named label 1 'dog': the file says label 2 is."""
    root = folder(tmp_path, "cat\n\ndog\nbird\n")
    assert refusal(root) == (f"{root / 'classes.txt'}: line 2 is blank: line i names label "
                             "i - 1, so every class needs a name")
    folder(tmp_path, "cat\r\ndog\r\nbird\r\n\r\n  \n")  # blank lines at the end name nothing
    assert load_dataset("folder", root).spec.classes == ("cat", "dog", "bird")


def test_names_that_differ_only_in_unicode_normalization_are_one_name_twice(tmp_path: Path):
    root = folder(tmp_path, f"{NFC}\nbird\n{NFD}\n")
    assert refusal(root) == (f"{root / 'classes.txt'}: class '{NFD}' is named twice (line 1 "
                             "and line 3)")
    x, y = torch.zeros(3, 2), torch.arange(3)  # a loader's own names: checked when loaded
    with pytest.raises(DatasetError, match=f"dataset 'mine': class '{NFD}' is named twice"):
        check_dataset("mine", Dataset.from_raw("mine", [NFC, "bird", NFD], (x, y), (x, y)))


def test_sixty_thousand_class_names_load_and_a_late_repeat_is_found(tmp_path: Path):
    """The documented range is 1..100,000 classes (the check is one pass: tensors.py)."""
    names = [f"class {c}" for c in range(60_000)]
    root = folder(tmp_path, "\n".join(names))
    assert load_dataset("folder", root).spec.num_classes == 60_000
    (tmp_path / "again").mkdir()
    again = folder(tmp_path / "again", "\n".join([*names[:-1], "class 7"]))
    assert refusal(again) == (f"{again / 'classes.txt'}: class 'class 7' is named twice (line "
                              "8 and line 60000)")


SPECS = '''
import torch
from pflkit.sdk.data import Dataset, DatasetSource, DatasetSpec, Standardize


def load(root, seed):
    x, y = torch.zeros(4, 3), torch.zeros(4, dtype=torch.long)
    return Dataset.from_raw("mine", ["a"], (x, y), (x, y))


def source(classes, shape):
    return DatasetSource(load, lambda size: DatasetSpec("mine", classes, Standardize(shape)))


NO_CLASS = source((), (3,))
TWICE = source(("caf\\u00e9", "cafe\\u0301"), (3,))
NO_INPUT = source(("a",), (0,))
'''


@pytest.mark.parametrize("attr,message", [
    ("NO_CLASS", "has 0 classes: a dataset has 1 to 100000"),
    ("TWICE", "class 'cafe\u0301' is named twice or is no text"),
    ("NO_INPUT", "inputs are (0,): 1 to 8 axes"),
])
def test_a_spec_told_without_the_data_is_checked_as_a_loaded_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, attr: str, message: str):
    """pfl-server builds its model from the spec alone: these were models of 0 outputs."""
    (tmp_path / "s17_specs.py").write_text(SPECS)
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(DatasetError) as refused:
        dataset_spec(f"s17_specs:{attr}")
    assert str(refused.value).startswith(f"dataset 's17_specs:{attr}'")
    assert message in str(refused.value)


def test_a_name_holding_a_unicode_line_separator_stays_one_name(tmp_path: Path):
    """str.splitlines cut 'a\\u2028b' in two: three names for two lines, the later ones moved."""
    root = folder(tmp_path, "walk\nsit\u2028down\nrun\x0cfast\n")
    assert load_dataset("folder", root).spec.classes == ("walk", "sit\u2028down", "run\x0cfast")
    folder(tmp_path, "walk\rsit\rrun\r" + "\n" * 200_000)  # old Mac lines; a tail of blanks
    assert load_dataset("folder", root).spec.classes == ("walk", "sit", "run")
