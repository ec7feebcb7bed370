"""A config file, ``--set`` value or task from outside is bounded before it is used.

Before: ``pfl-sim --config`` read any file whole (a 1 GB file, or ``/dev/zero`` forever);
arrays nested a few hundred deep were a RecursionError traceback, an integer of 5000 digits
Python's ``sys.set_int_max_str_digits`` advice without the file's name; a 100 000-character
model name was echoed whole, a name with a newline split the error line; a task could ask a
device for a head of 10**12 classes.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pflkit.sdk.config_toml import MAX_CONFIG_BYTES, MAX_DEPTH, apply_overrides, read_toml
from pflkit.sdk.config_types import SHOWN
from pflkit.sdk.data.folder import MAX_CLASSES
from pflkit.sdk.registry import ImportPolicy
from pflkit.sdk.run_config import ConfigError, SimConfig
from pflkit.sdk.task_config import MAX_AXES, TaskConfig
from pflkit.server.simulator_cli import app

GOOD = 'rounds = 2\n[data]\ndataset = "synthetic"\nnum_clients = 4\n[model]\nname = "twonn"\n'


def one_line(err: pytest.ExceptionInfo[ConfigError]) -> str:
    text = str(err.value)
    assert "\n" not in text and len(text) < 300, text
    return text


def test_a_config_file_is_read_only_up_to_its_limit(tmp_path):
    big = tmp_path / "big.toml"
    big.write_text(GOOD + "#" * MAX_CONFIG_BYTES)  # valid TOML, one byte too many
    with pytest.raises(ConfigError) as refused:
        SimConfig.load(big)
    assert one_line(refused) == (f"{big}: larger than {MAX_CONFIG_BYTES} bytes, the most a "
                                 "config may hold (is it the config file?)")
    with pytest.raises(ConfigError, match="larger than"):
        read_toml(Path("/dev/zero"))  # endless: read only up to the limit
    big.write_text(GOOD + "#" * (MAX_CONFIG_BYTES - len(GOOD)))
    assert SimConfig.load(big).rounds == 2  # the limit itself is fine


def test_nesting_and_digits_beyond_pythons_limits_are_one_line_naming_the_file(tmp_path):
    deep = tmp_path / "deep.toml"
    deep.write_text(GOOD + "[algorithm.params]\nmu = " + "[" * 3000 + "]" * 3000 + "\n")
    result = CliRunner().invoke(app, ["--config", str(deep), "--out", str(tmp_path / "run"),
                                      "--quiet"])
    assert result.exit_code == 2, result.output
    assert result.output.strip() == (f"error: {deep}: tables and arrays nested more than "
                                     f"{MAX_DEPTH} deep")
    assert not (tmp_path / "run").exists()
    just_over = "x = " + "[" * MAX_DEPTH + "]" * MAX_DEPTH  # the document is one more level
    with pytest.raises(ConfigError, match="^config: tables and arrays nested more than "):
        SimConfig.from_toml(just_over)
    with pytest.raises(ConfigError) as refused:
        SimConfig.from_toml("rounds = " + "9" * 5000, "run.toml")
    assert one_line(refused) == "run.toml: a number of more than 4300 digits"


@pytest.mark.parametrize("value,reason", [
    ("[" * 3000, f"tables and arrays nested more than {MAX_DEPTH} deep"),
    ("9" * 5000, "a number of more than 4300 digits"),
])
def test_a_set_value_beyond_the_limits_names_its_key(value, reason):
    with pytest.raises(ConfigError) as refused:
        apply_overrides({}, [f"training.lr={value}"])
    assert one_line(refused) == f"training.lr: {reason}"


@pytest.mark.parametrize("name,message", [
    ("a" * 100_000, "string should have at most 200 characters, got 'aaaa"),
    ("twonn\n", r"must be printable characters without spaces, got 'twonn\n'"),
    ("x:y\x1b[2J", r"must be printable characters without spaces, got 'x:y\x1b[2J'"),
    ("twonn ", "must be printable characters without spaces, got 'twonn '"),
])
def test_a_name_is_short_and_printable_before_anything_echoes_or_resolves_it(name, message):
    text = GOOD.replace('"twonn"', json.dumps(name))  # a JSON string is a TOML string
    for policy in (None, ImportPolicy(setting="allow_imports")):  # own config, server's
        with pytest.raises(ConfigError) as refused:
            SimConfig.from_toml(text, imports=policy) if policy else SimConfig.from_toml(text)
        assert one_line(refused).startswith(f"model.name: {message}"), refused.value


def test_a_long_value_is_shown_shortened_in_its_error():
    with pytest.raises(ConfigError) as refused:
        SimConfig.from_toml("seed = " + "9" * 400)
    assert one_line(refused) == "seed: must be in [0, 4294967295], got an integer of 1329 bits"
    with pytest.raises(ConfigError) as refused:
        SimConfig.from_toml(GOOD.replace('"synthetic"', '["' + "b" * 500 + '"]'))
    shown = str(refused.value).rpartition("got ")[2]
    assert len(shown) == SHOWN and shown.endswith("..."), shown


def task_wire(**changes: object) -> dict:
    wire = {"algorithm": "fedavg", "params": {}, "model": "twonn", "input_shape": [1, 8, 8],
            "num_classes": 10, "seed": 0, "total_rounds": 2,
            "lr_schedule": {"lr": 0.1, "decay": 1.0},
            "local": {"epochs": 1, "batch_size": 4, "momentum": 0.0, "weight_decay": 0.0}}
    return {**wire, **changes}


@pytest.mark.parametrize("changes,message", [
    ({"num_classes": 10**12}, f"num_classes: must be in [1, {MAX_CLASSES}], got 1000000000000"),
    ({"num_classes": True}, "num_classes: input should be a valid integer, got True"),
    ({"input_shape": [1] * 10_000}, f"input_shape: tuple should have at most {MAX_AXES} items"),
    ({"input_shape": [0, 8]}, "input_shape.0: must be in [1, 2147483647], got 0"),
    ({"model": "twonn\n"}, "model: must be printable characters without spaces"),
])
def test_a_task_beyond_its_ranges_is_refused_in_one_line_naming_the_key(changes, message):
    """A device would have built a 10**12-class head (8 TB) before: the server chose it."""
    with pytest.raises(ConfigError) as refused:
        TaskConfig.from_wire(task_wire(**changes), ImportPolicy())
    assert one_line(refused).startswith(f"task config: {message}"), refused.value
    TaskConfig.from_wire(task_wire(num_classes=MAX_CLASSES), ImportPolicy())


def test_a_task_pfl_sim_would_refuse_for_its_method_rules_is_refused_the_same_way():
    """FedRep's body epochs are the last of the E local ones: 3 of E = 1 is no schedule."""
    params, local = {"body_epochs": 3}, {"epochs": 1, "batch_size": 4, "momentum": 0.0,
                                         "weight_decay": 0.0}
    detail = "fedrep: hyperparameter 'body_epochs' must be <= the local epochs E (1), got 3"
    with pytest.raises(ConfigError) as simulated:
        SimConfig.from_toml(GOOD + "[algorithm]\nname = 'fedrep'\n[algorithm.params]\n"
                            "body_epochs = 3\n[training]\nepochs = 1\n")
    assert str(simulated.value) == f"algorithm.params: {detail}"
    with pytest.raises(ConfigError) as refused:
        TaskConfig.from_wire(task_wire(algorithm="fedrep", params=params, local=local),
                             ImportPolicy())
    assert one_line(refused) == f"task config: params: {detail}"


def test_a_key_a_server_chose_reaches_the_terminal_escaped():
    """pfl-client prints the refusal: a key holding an escape sequence must not act on it."""
    with pytest.raises(ConfigError) as refused:
        TaskConfig.from_wire({**task_wire(), "x\x1b[2J": 1}, ImportPolicy())
    assert one_line(refused) == r"task config: x\x1b[2J: unknown key"


def test_a_run_whose_dataset_has_more_classes_than_a_task_allows_is_refused_by_the_server():
    """pfl-server derives the task from the dataset's spec: refused naming the task's key."""
    from pflkit.sdk.data.spec import DatasetSpec, Standardize

    spec = DatasetSpec("many", tuple(map(str, range(MAX_CLASSES + 1))), Standardize((4,)))
    with pytest.raises(ConfigError) as refused:
        TaskConfig.of(SimConfig.from_toml(GOOD), spec)
    assert one_line(refused) == (f"task config: num_classes: must be in [1, {MAX_CLASSES}], "
                                 f"got {MAX_CLASSES + 1}")


@pytest.mark.parametrize("root,message", [
    ("\\u0000x", "data.root: must not contain a NUL character"),
    ("a" * 5000, "data.root: string should have at most 4096 characters, got 'aaaa"),
])
def test_a_data_root_no_file_system_takes_is_refused_naming_the_key(root, message):
    """Before: accepted, then "embedded null byte" or ENAMETOOLONG naming nothing, later."""
    with pytest.raises(ConfigError) as refused:
        SimConfig.from_toml(GOOD.replace("[data]\n", f'[data]\nroot = "{root}"\n'))
    assert one_line(refused).startswith(message), refused.value


def test_a_task_whose_learning_rate_would_reach_zero_is_refused_as_pfl_sim_refuses_it():
    schedule = {"lr": 0.01, "decay": 0.5}
    with pytest.raises(ConfigError) as simulated:
        SimConfig.from_toml(GOOD.replace("rounds = 2", "rounds = 1000") +
                            "[training]\nlr = 0.01\nlr_decay = 0.5\n")
    detail = simulated.value.args[0].removeprefix("training.lr_decay: ")
    with pytest.raises(ConfigError) as refused:
        TaskConfig.from_wire(task_wire(lr_schedule=schedule, total_rounds=1000), ImportPolicy())
    assert one_line(refused) == f"task config: lr_schedule.decay: {detail}"
