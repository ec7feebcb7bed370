"""One limit per concept, and error lines that stay one readable line (independent test, s13).

Before: 80 000 unknown ``[algorithm.params]`` keys made an error line of 0.6 MB (every name,
an escape sequence in one raw), a 100 000-character bad value one of 100 KB; ``POST /v1/runs``
counted a config's 1 MB in characters, so a text pfl-sim refuses as a file (1.2 MB of UTF-8)
was a run; pfl-sim trained a dataset of 100 001 classes that pfl-server refuses; ``--set
'training."lr"=0.1'`` (the key as a TOML file spells it) was an unknown key, ``--set
training..lr=1`` an unknown key ``training.``.
"""

from __future__ import annotations

import dataclasses
import json
import textwrap

import pytest
from pydantic import ValidationError
from pydantic_core import from_json
from typer.testing import CliRunner

from pflkit.sdk.config_toml import MAX_CONFIG_BYTES, MAX_DEPTH, read_toml
from pflkit.sdk.config_types import shown
from pflkit.sdk.data.datasets import dataset_source
from pflkit.sdk.data.spec import MAX_CLASSES, check_dataset
from pflkit.sdk.run_config import ConfigError, SimConfig
from pflkit.sdk.task_config import TaskConfig
from pflkit.server.api.schemas import RunCreateIn
from pflkit.server.simulator_cli import app

GOOD = 'rounds = 2\n[data]\ndataset = "synthetic"\nnum_clients = 4\n[model]\nname = "twonn"\n'


def pfl_sim(tmp_path, config: str, *flags: str) -> tuple[int, str]:
    path = tmp_path / "run.toml"
    path.write_text(config)
    result = CliRunner().invoke(app, ["--config", str(path), "--out", str(tmp_path / "run"),
                                      "--quiet", *flags])
    return result.exit_code, result.output


@pytest.mark.parametrize("method,start", [
    ("fedprox", "fedprox: unknown hyperparameter 'k0', 'k1', 'k10' (and 79997 more) (known: "
                "mu)"),
    ("fedavg", "fedavg: takes no hyperparameters, got 'k0', 'k1', 'k10' (and 79997 more)"),
])
def test_many_unknown_hyperparameters_are_named_a_few_and_counted(tmp_path, method, start):
    keys = "\n".join(f"k{i}=1" for i in range(80_000))
    code, output = pfl_sim(tmp_path, f'{GOOD}[algorithm]\nname = "{method}"\n'
                           f"[algorithm.params]\n{keys}\n")
    assert (code, output) == (2, f"error: algorithm.params: {start}\n")
    assert not (tmp_path / "run").exists()


def test_an_unknown_hyperparameter_is_shown_cut_and_escaped():
    text = (f'{GOOD}[algorithm]\nname = "fedavg"\n[algorithm.params]\n'
            f'"{"x" * 100_000}" = 1\n"a\\u001b[2J" = 2\n')
    with pytest.raises(ConfigError) as refused:
        SimConfig.from_toml(text)
    assert str(refused.value) == ("algorithm.params: fedavg: takes no hyperparameters, got "
                                  f"'a\\x1b[2J', '{'x' * 76}...")


@pytest.mark.parametrize("value,got", [(f'"{"x" * 100_000}"', f"'{'x' * 76}..."),
                                       (f"[{', '.join(['1'] * 50_000)}]", f"[{'1, ' * 25}1...")])
def test_a_hyperparameters_bad_value_is_shown_cut(value, got):
    with pytest.raises(ConfigError) as refused:
        SimConfig.from_toml(f'{GOOD}[algorithm]\nname = "fedprox"\n[algorithm.params]\n'
                            f"mu = {value}\n")
    assert str(refused.value) == ("algorithm.params: fedprox: hyperparameter 'mu': input "
                                  f"should be a valid number, got {got}")


def test_a_posted_config_has_the_config_files_limit_in_bytes(tmp_path):
    """The same text is refused as a file and as ``POST /v1/runs``'s body, and so is 1 byte more."""
    room = MAX_CONFIG_BYTES - len(GOOD) - 2  # "# " then 2-byte characters: 1 byte over
    over = GOOD + "# " + "é" * (room // 2 + 1)
    assert len(over) < MAX_CONFIG_BYTES < len(over.encode())
    (tmp_path / "over.toml").write_text(over)
    with pytest.raises(ConfigError, match="larger than 1000000 bytes"):
        read_toml(tmp_path / "over.toml")
    with pytest.raises(ValidationError) as refused:  # as bodies.py reads a JSON body
        RunCreateIn.model_validate(from_json(json.dumps({"config_toml": over})))
    assert [(e["loc"], e["msg"]) for e in refused.value.errors()] == [(("config_toml",), (
        f"Value error, larger than {MAX_CONFIG_BYTES} bytes in UTF-8, the most a config may "
        "hold"))]
    at_limit = GOOD + "#" * (MAX_CONFIG_BYTES - len(GOOD))
    assert RunCreateIn(config_toml=at_limit).config_toml == at_limit
    with pytest.raises(ValidationError):
        RunCreateIn(config_toml=at_limit + "#")


MANY_CLASSES = """\
import torch
from pflkit.sdk.data.spec import Dataset


def load(root, seed):
    x = torch.rand(64, 4, generator=torch.Generator().manual_seed(seed))
    return Dataset.from_raw("many", [str(c) for c in range(CLASSES)], (x, torch.arange(64)),
                            (x[:8], torch.arange(8)))
"""


@pytest.mark.parametrize("classes", [MAX_CLASSES + 1, 0])
def test_pfl_sim_refuses_the_class_counts_pfl_server_refuses(tmp_path, monkeypatch, classes):
    (tmp_path / f"many_{classes}.py").write_text(MANY_CLASSES.replace("CLASSES", str(classes)))
    monkeypatch.syspath_prepend(str(tmp_path))
    config = textwrap.dedent(f"""\
        rounds = 1
        [data]
        dataset = "many_{classes}:load"
        num_clients = 4
        kind = "iid"
        [model]
        name = "twonn"
        """)
    code, output = pfl_sim(tmp_path, config)
    assert (code, output) == (2, f"error: dataset 'many_{classes}:load' has {classes} classes: "
                                 f"a dataset has 1 to {MAX_CLASSES}\n")
    assert not (tmp_path / "run").exists()
    # pfl-server's task for such a dataset: refused at the same bound
    spec = dataset_source(f"many_{classes}:load").load(root=None, seed=0).spec
    with pytest.raises(ConfigError, match=f"num_classes: must be in \\[1, {MAX_CLASSES}\\]"):
        TaskConfig.of(SimConfig.from_toml(config), spec)


def test_the_class_limit_itself_is_a_dataset():
    dataset = dataset_source("synthetic").load(root=None, seed=0)
    widest = dataclasses.replace(dataset, spec=dataclasses.replace(
        dataset.spec, classes=tuple(map(str, range(MAX_CLASSES)))))
    assert check_dataset("synthetic", widest).spec.num_classes == MAX_CLASSES


@pytest.mark.parametrize("key", ['training."lr"', "training . lr", "'training'.lr"])
def test_set_reads_a_key_as_the_same_line_of_a_file_does(tmp_path, key):
    config = SimConfig.load(_written(tmp_path), [f"{key}=0.125"])
    assert config.training.lr == 0.125 == SimConfig.from_toml(f"{key} = 0.125\n{GOOD}"
                                                              ).training.lr


def test_a_quoted_part_holds_a_dot(tmp_path):
    with pytest.raises(ConfigError) as refused:
        SimConfig.load(_written(tmp_path), ['algorithm.params."a.b"=1', "algorithm.name=fedprox"])
    assert str(refused.value) == ("algorithm.params: fedprox: unknown hyperparameter 'a.b' "
                                  "(known: mu)")


@pytest.mark.parametrize("key", ["training..lr", ".", "training.", "training.l r",
                                 "training.lr\nrounds", "[training]"])
def test_set_refuses_what_is_not_a_toml_key_in_one_line(tmp_path, key):
    with pytest.raises(ConfigError) as refused:
        SimConfig.load(_written(tmp_path), [f"{key}=0.125"])
    assert str(refused.value) == (f"--set: {key.strip()!r} is not a TOML key (e.g. "
                                  'training.lr, algorithm.params."a.b")')


def _written(tmp_path):
    path = tmp_path / "run.toml"
    path.write_text(GOOD)
    return path


def test_set_refuses_a_key_deeper_than_a_config_may_nest(tmp_path):
    """Read as TOML, a key of 50 000 parts took tomllib minutes: refused by its dots first."""
    deepest = ".".join(["a"] * MAX_DEPTH)  # MAX_DEPTH tables: as deep as a file may nest
    with pytest.raises(ConfigError, match="^a: unknown key"):
        SimConfig.load(_written(tmp_path), [f"{deepest}=1"])
    for key in (f"{deepest}.a", "training." + ".".join(["x"] * 50_000)):
        with pytest.raises(ConfigError) as refused:
            SimConfig.load(_written(tmp_path), [f"{key}=1"])
        assert str(refused.value) == (f"--set: {shown(key)}: tables nested more than "
                                      f"{MAX_DEPTH} deep")
