"""The run config is validated whole, strictly, with one-line errors that name the TOML key."""

import pytest

from pflkit.sdk.config_toml import apply_overrides, parse_toml, parse_value
from pflkit.sdk.run_config import ConfigError, SimConfig

GOOD = """
seed = 1
rounds = 3
[data]
dataset = "digits"
kind = "iid"
num_clients = 4
[model]
name = "twonn"
[algorithm]
name = "fedprox"
[algorithm.params]
mu = 0.1
[training]
clients_per_round = 2
epochs = 1
lr = 0.05
"""


def load(text: str, *overrides: str) -> SimConfig:
    return SimConfig.from_mapping(apply_overrides(parse_toml(text), overrides))


@pytest.mark.parametrize("override,message", [
    # strings never become numbers (issue #15 item 11: these used to start and crash mid-run)
    ('rounds="2"', "rounds: input should be a valid integer, got '2'"),
    ('training.epochs="two"', "training.epochs: input should be a valid integer, got 'two'"),
    ('training.lr="fast"', "training.lr: input should be a valid number, got 'fast'"),
    ("training.epochs=2.0", "training.epochs: input should be a valid integer, got 2.0"),
    ("rounds=true", "rounds: input should be a valid integer, got True"),
    ("training.lr=nan", "training.lr: input should be a finite number, got nan"),
    ("rounds=0", "rounds: input should be greater than or equal to 1, got 0"),
    ("data.num_clients=-3", "data.num_clients: input should be greater than or equal to 1"),
    ("data.kind=random", "data.kind: input should be 'iid', 'shards' or 'dirichlet', got 'random'"),
    ("training.learning_rate=0.1", "training.learning_rate: unknown key"),
    ("data.partitions=3", "data.partitions: unknown key"),
    ("model.width=3", "model.width: unknown key (known: name)"),
    ("colour=1", "colour: unknown key"),
    ("model.name=resnet9000", "model.name: unknown model 'resnet9000'; known: fedrod_convnet"),
    ("data.dataset=imagenet", "data.dataset: unknown dataset 'imagenet'"),
    ("algorithm.name=nope.mod:Thing", "algorithm.name: algorithm 'nope.mod:Thing': cannot import "
                                      "nope.mod (ModuleNotFoundError: No module named 'nope')"),
    ('algorithm.params.mu="0.1"', "algorithm.params: fedprox: hyperparameter 'mu': input should "
                                  "be a valid number, got '0.1'"),
    ("algorithm.params.nu=2", "algorithm.params: fedprox: unknown hyperparameter 'nu'"),
    ("training.clients_per_round=9",
     "training.clients_per_round: 9 is more than the 4 training clients"),
    ("data.num_new_clients=4", "data: num_new_clients = 4 leaves no client to train"),
    ("execution.device=tpu", "execution.device: device must be"),
])
def test_a_bad_value_is_one_line_naming_the_key(override, message):
    with pytest.raises(ConfigError) as err:
        load(GOOD, override)
    text = str(err.value)
    assert text.startswith(message), text
    assert "\n" not in text


def test_ints_are_accepted_for_floats_and_the_result_round_trips():
    config = load(GOOD, "training.lr=1", "training.momentum=0")
    assert config.training.lr == 1.0 and isinstance(config.training.lr, float)
    assert SimConfig.from_toml(config.to_toml()) == config


def test_set_overrides_any_key_with_toml_values():
    config = load(GOOD, "training.lr=0.5", "algorithm.params.mu=1e-3", "data.dataset=synthetic",
                  'data.root="/tmp/x"', "data.resize=12", "seed=7")
    assert (config.training.lr, config.params, config.data.dataset, config.seed) == \
        (0.5, {"mu": 0.001}, "synthetic", 7)
    assert (config.data.root, config.data.resize) == ("/tmp/x", 12)


@pytest.mark.parametrize("text,value", [
    ("0.05", 0.05), ("3", 3), ("true", True), ("[1, 2]", [1, 2]), ('"2"', "2"),
    ("digits", "digits"), ("/data/fmnist", "/data/fmnist"),
])
def test_set_values_are_parsed_as_toml_else_taken_as_text(text, value):
    assert parse_value(text) == value


def test_bad_set_syntax_and_bad_toml_are_one_line_errors():
    with pytest.raises(ConfigError, match="--set expects KEY=VALUE"):
        load(GOOD, "training.lr")
    with pytest.raises(ConfigError, match="rounds is a value, not a table"):
        load(GOOD, "rounds.x=1")
    with pytest.raises(ConfigError, match="not valid TOML"):
        SimConfig.from_toml("rounds = [")
    with pytest.raises(ConfigError, match=r"^data: must be a \[data\] table"):
        SimConfig.from_toml("data = 3")


def test_constructing_a_config_in_python_validates_it_too():
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="valid integer"):
        SimConfig(rounds="2")  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="unknown algorithm"):
        SimConfig(algorithm="nope")


def test_the_task_a_client_receives_is_the_run_configs_part_typed_the_same_way():
    from pflkit.sdk.builder import data_spec
    from pflkit.sdk.registry import ImportPolicy
    from pflkit.sdk.task_config import TaskConfig

    config = load(GOOD)
    task = TaskConfig.of(config, data_spec(config), lr=0.04)
    wire = task.to_wire()
    assert wire["input_shape"] == [1, 8, 8] and wire["local"]["epochs"] == 1
    assert TaskConfig.from_wire(wire, ImportPolicy()) == task
    assert task.build().params.mu == 0.1
    bad = {**wire, "local": {**wire["local"], "epochs": "2"}}
    with pytest.raises(ConfigError, match=r"^task config: local.epochs: input should be a valid "
                                          r"integer, got '2'$"):
        TaskConfig.from_wire(bad, ImportPolicy())
    with pytest.raises(ConfigError, match="^task config: extra: unknown key$"):
        TaskConfig.from_wire({**wire, "extra": 1}, ImportPolicy())
