"""The run config is validated whole, strictly, with one-line errors that name the TOML key."""

import pytest

from pflkit.sdk.config_toml import apply_overrides, parse_toml, parse_value
from pflkit.sdk.run_config import AlgorithmConfig, ConfigError, SimConfig

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
    ("rounds=0", "rounds: must be in [1, 100000], got 0"),
    ("data.num_clients=-3", "data.num_clients: must be in [1, 100000], got -3"),
    ("data.kind=random",
     "data.kind: input should be 'iid', 'shards', 'dirichlet' or 'natural', got 'random'"),
    ("training.learning_rate=0.1", "training.learning_rate: unknown key (did you mean "
                                   "training.lr?)"),
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


@pytest.mark.parametrize("override,message", [
    # issue #21 item 2: these answered 500 on POST /v1/runs and tracebacks from pfl-server
    ("training.lr_decay=1e300", "training.lr_decay: must be in (0, 1], got 1e+300"),
    ("training.lr_decay=1.5", "training.lr_decay: must be in (0, 1], got 1.5"),
    ("data.resize=1000000", "data.resize: must be in [1, 512], got 1000000"),
    ("data.resize=4611686018427387904", "data.resize: must be in [1, 512], got 46116860"),
    ("seed=18446744073709551616", "seed: must be in [0, 4294967295], got 18446744073709551616"),
    ("seed=-1", "seed: must be in [0, 4294967295], got -1"),
    ("rounds=100001", "rounds: must be in [1, 100000], got 100001"),
    ("eval_interval=1000000", "eval_interval: must be in [1, 100000], got 1000000"),
    ("training.lr=0", "training.lr: must be in (0, 10], got 0.0"),
    ("training.lr=1e300", "training.lr: must be in (0, 10], got 1e+300"),
    ("training.lr=inf", "training.lr: input should be a finite number, got inf"),
    ("training.momentum=1", "training.momentum: must be in [0, 1), got 1.0"),
    ("training.weight_decay=2", "training.weight_decay: must be in [0, 1], got 2.0"),
    ("training.epochs=1001", "training.epochs: must be in [0, 1000], got 1001"),
    ("training.batch_size=0", "training.batch_size: must be in [1, 65536], got 0"),
    ("training.fraction=1.5", "training.fraction: must be in [0, 1], got 1.5"),
    ("data.alpha=1e300", "data.alpha: must be in (0, 1e+06], got 1e+300"),
    ("data.test_fraction=1", "data.test_fraction: must be in [0, 1), got 1.0"),
    ("execution.num_cpus=0", "execution.num_cpus: must be in (0, 1024], got 0.0"),
    # decays to 0 before the last round: lr_at(rounds) would be refused mid-run
    ("training.lr_decay=1e-300", "training.lr_decay: lr x lr_decay ** rounds = 0.05 x 1e-300 ** "
                                 "3 = 0 is below 1.18e-38 (float32's smallest normal)"),
    ('algorithm.params.mu=1e300', "algorithm.params: fedprox: hyperparameter 'mu' must be in "
                                  "[0, 1e+06], got 1e+300"),
])
def test_every_number_has_a_range_named_in_one_line(override, message):
    with pytest.raises(ConfigError) as err:
        load(GOOD, override)
    assert str(err.value).startswith(message) and "\n" not in str(err.value), str(err.value)


def test_the_edges_of_the_ranges_are_accepted_and_every_rounds_lr_stays_positive():
    config = load(GOOD, "training.lr=10", "training.lr_decay=1", "training.momentum=0",
                  "training.weight_decay=1", "seed=4294967295", "data.resize=512",
                  "rounds=100000", "training.epochs=0")
    assert config.schedule().lr_at(100000) == 10.0
    slow = load(GOOD, "training.lr_decay=0.5", "rounds=100").schedule()
    assert 0 < slow.lr_at(100) < slow.lr_at(0)


@pytest.mark.parametrize("override,message", [
    ("training.learning_rate=0.1", "training.learning_rate: unknown key (did you mean "
                                   "training.lr?)"),
    ("training.learning_rate_decay=0.9", "(did you mean training.lr_decay?)"),
    ("data.alpah=1", "data.alpah: unknown key (did you mean data.alpha?)"),
    ("data.num_client=4", "(did you mean data.num_clients?)"),
    ("round=3", "round: unknown key (did you mean rounds?)"),
    ("execution.devcie=cpu", "(did you mean execution.device?)"),
    ("model.nmae=twonn", "model.nmae: unknown key (did you mean model.name?)"),
    ("algorithm.parms.mu=1", "algorithm.parms: unknown key (did you mean algorithm.params?)"),
])
def test_an_unknown_key_comes_with_the_closest_known_one(override, message):
    """Issue #21 item 11."""
    with pytest.raises(ConfigError) as err:
        load(GOOD, override)
    assert message in str(err.value), str(err.value)


def test_an_empty_config_is_refused_rather_than_run_with_the_defaults(tmp_path):
    for text in ("", "  \n# only a comment\n"):
        with pytest.raises(ConfigError, match=r"^config_toml: has no keys \(an empty run config "
                                              r"would start a 100-round run of the defaults\)$"):
            SimConfig.from_toml(text, "config_toml")
    (tmp_path / "run.toml").write_text("")
    with pytest.raises(ConfigError, match="run.toml: has no keys"):
        SimConfig.load(tmp_path / "run.toml")
    assert SimConfig.load(tmp_path / "run.toml", ["rounds=2"]).rounds == 2


def test_ints_are_accepted_for_floats_and_the_result_round_trips():
    config = load(GOOD, "training.lr=1", "training.momentum=0")
    assert config.training.lr == 1.0 and isinstance(config.training.lr, float)
    assert SimConfig.from_toml(config.to_toml()) == config


def test_set_overrides_any_key_with_toml_values():
    config = load(GOOD, "training.lr=0.5", "algorithm.params.mu=1e-3", "data.dataset=synthetic",
                  'data.root="/tmp/x"', "data.resize=12", "seed=7")
    assert (config.training.lr, config.algorithm.params, config.data.dataset, config.seed) == \
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
        SimConfig(algorithm=AlgorithmConfig("nope"))


def test_the_task_a_client_receives_is_the_run_configs_part_typed_the_same_way():
    from pflkit.sdk.builder import data_spec
    from pflkit.sdk.registry import ImportPolicy
    from pflkit.sdk.task_config import TaskConfig

    config = load(GOOD)
    task = TaskConfig.of(config, data_spec(config))
    wire = task.to_wire()
    assert wire["input_shape"] == [1, 8, 8] and wire["local"]["epochs"] == 1
    assert wire["lr_schedule"] == {"lr": config.training.lr, "decay": config.training.lr_decay}
    assert TaskConfig.from_wire(wire, ImportPolicy()) == task
    assert task.build().params.mu == 0.1
    bad = {**wire, "local": {**wire["local"], "epochs": "2"}}
    with pytest.raises(ConfigError, match=r"^task config: local.epochs: input should be a valid "
                                          r"integer, got '2'$"):
        TaskConfig.from_wire(bad, ImportPolicy())
    with pytest.raises(ConfigError, match="^task config: extra: unknown key$"):
        TaskConfig.from_wire({**wire, "extra": 1}, ImportPolicy())
