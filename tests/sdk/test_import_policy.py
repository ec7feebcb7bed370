"""Configuration names code, the owner of a process decides which (issue #21 item 1).

Before: a ``package.module:attr`` in a run config or a task was imported wherever it appeared
(a server could make every device import any module), and anything callable it named was
called as a model or a dataset (``model.name = "os:getcwd"``: a TypeError). Each probe module
here records its import in a file, so "refused before importing anything" is observed, not
assumed. The device's server is a real one on loopback (hostile_harness.py).
"""

from __future__ import annotations

import sys

import pytest
import torch
from hostile_harness import device, json_answer
from pydantic import ValidationError

from pflkit.sdk.client import FederatedClient
from pflkit.sdk.data.tensors import LabeledTensors
from pflkit.sdk.registry import OWN_CONFIG, ImportPolicy, ImportRefused
from pflkit.sdk.run_config import ConfigError, SimConfig
from pflkit.sdk.task_config import TaskConfig
from pflkit.server.settings import ServerSettings, explain

PROBE = '''\
import pathlib
pathlib.Path(__file__).with_suffix(".imported").touch()
CALLS = []

from pflkit.sdk.algorithms.fedavg import FedAvg
from pflkit.sdk.data.datasets import DATASETS
from pflkit.sdk.models import two_nn


def net(shape, num_classes):
    CALLS.append("net")
    return two_nn(shape, num_classes)


def no_arguments():
    CALLS.append("no_arguments")


class NotAModel:
    def __init__(self, shape, num_classes):
        CALLS.append("NotAModel")


class Method(FedAvg):
    name = "probe_method"


SYNTHETIC = DATASETS["synthetic"]
'''

CONFIG = """\
rounds = 2
[data]
dataset = "{dataset}"
num_clients = 4
[model]
name = "{model}"
[algorithm]
name = "{algorithm}"
"""


@pytest.fixture
def probe(tmp_path, monkeypatch):
    """A fresh importable module ``probe_<n>`` that leaves a file when it is imported."""
    name = f"probe_{tmp_path.name.replace('-', '_')}"
    (tmp_path / f"{name}.py").write_text(PROBE)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield name, tmp_path / f"{name}.imported"
    sys.modules.pop(name, None)


def config(probe_name: str, **names: str) -> str:
    defaults = {"dataset": "synthetic", "model": "twonn", "algorithm": "fedavg"}
    return CONFIG.format(**{**defaults, **{k: f"{probe_name}:{v}" for k, v in names.items()}})


@pytest.mark.parametrize("key,field,attr", [("model.name", "model", "net"),
                                            ("data.dataset", "dataset", "SYNTHETIC"),
                                            ("algorithm.name", "algorithm", "Method")])
def test_an_import_path_is_refused_before_importing_unless_its_package_is_allowed(
        probe, key, field, attr):
    name, imported = probe
    text = config(name, **{field: attr})
    with pytest.raises(ConfigError) as refused:
        SimConfig.from_toml(text, imports=ImportPolicy(setting="the server's allow_imports"))
    assert str(refused.value) == (f"{key}: {field} '{name}:{attr}': not imported: package "
                                  f"'{name}' is not in the server's allow_imports")
    assert name not in sys.modules and not imported.exists()
    SimConfig.from_toml(text, imports=ImportPolicy.allowing([name], "x"))
    assert imported.exists()  # the probe does see an import


def test_the_allow_list_names_packages_or_exact_paths_and_nothing_is_imported_to_decide(
        monkeypatch, tmp_path):
    policy = ImportPolicy.allowing(["myapp", "other.nets:Net,  third.sub"], "x")
    assert policy.permits("model", "myapp:Net") and policy.permits("model", "myapp.nets.v2:Net")
    assert policy.permits("model", "other.nets:Net") and policy.permits("model", "third.sub.m:N")
    for ref in ("myapp_evil:Net", "myappx.nets:Net", "other.nets:Evil", "other:Net",
                "third:Net", "os:getcwd"):
        assert not policy.permits("model", ref), ref
    assert OWN_CONFIG.permits("model", "anything.at:all")
    # an import path an installed entry point of the same kind names: the owner installed it
    monkeypatch.setattr("pflkit.sdk.registry._entry_points", lambda kind: {
        "sensornet": type("EP", (), {"value": "sensorkit.nets:SensorNet"})()}
        if kind == "model" else {})
    assert ImportPolicy().permits("model", "sensorkit.nets:SensorNet")
    assert not ImportPolicy().permits("dataset", "sensorkit.nets:SensorNet")
    assert not ImportPolicy().permits("model", "sensorkit.nets:Other")
    for bad in ("my app", "../x", "x:", ":y", "x::y", "*"):
        with pytest.raises(ValueError, match="is neither a package name nor an import path"):
            ImportPolicy.allowing([bad], "x")
    with pytest.raises(ValueError, match="^allow_imports: 'my app' is neither"):
        FederatedClient("http://fl.test", tmp_path, LabeledTensors(torch.rand(2, 3), torch.ones(2)),
                        allow_imports=["my app"])
    with pytest.raises(ValidationError) as refused:
        ServerSettings(admin_token="x" * 20, allow_imports="myapp,my app")
    assert explain(refused.value) == ("--allow-imports (or PFL_SERVER_ALLOW_IMPORTS): 'my app' "
                                      "is neither a package name nor an import path "
                                      "'package.module:attr'")


@pytest.mark.parametrize("field,attr,message", [
    ("model", "no_arguments", "is not a callable (input_shape, num_classes) -> SplitModel "
                              "(TypeError: too many positional arguments)"),
    ("model", "NotAModel", "is the class NotAModel, not a SplitModel subclass"),
    ("model", "CALLS", "is a list, not a callable (input_shape, num_classes) -> SplitModel"),
    ("dataset", "no_arguments", "is not a DatasetSource or a function (root, seed) -> Dataset "
                                "(TypeError: got an unexpected keyword argument 'root')"),
    ("dataset", "NotAModel", "is the class NotAModel, not a DatasetSource or a function "
                             "(root, seed) -> Dataset"),
    ("algorithm", "net", "is not a subclass of pflkit.sdk.algorithms.Algorithm"),
])
def test_what_is_not_a_model_dataset_or_algorithm_is_refused_without_being_called(
        probe, field, attr, message):
    name, _ = probe
    key = {"model": "model.name", "dataset": "data.dataset", "algorithm": "algorithm.name"}
    with pytest.raises(ConfigError) as refused:
        SimConfig.from_toml(config(name, **{field: attr}))  # pfl-sim: its own config
    assert str(refused.value) == f"{key[field]}: {field} '{name}:{attr}' {message}"
    assert sys.modules[name].CALLS == []
    for builtin in ("os:getcwd", "os:sep"):
        with pytest.raises(ConfigError, match=f"^model.name: model '{builtin}' is "):
            SimConfig.from_toml(CONFIG.format(dataset="synthetic", model=builtin,
                                              algorithm="fedavg"))


def task_wire(model: str) -> dict:
    return {"algorithm": "fedavg", "params": {}, "model": model, "input_shape": [1, 8, 8],
            "num_classes": 10, "seed": 0, "total_rounds": 2,
            "lr_schedule": {"lr": 0.1, "decay": 1.0},
            "local": {"epochs": 1, "batch_size": 4, "momentum": 0.0, "weight_decay": 0.0}}


def test_a_device_refuses_a_task_naming_an_import_path_it_was_not_allowed(
        probe, tmp_path, hostile):
    """Nothing imported, nothing downloaded, trained or uploaded: only the task was read."""
    name, imported = probe
    hostile.add(json_answer(200, {"status": "train", "run_id": 1, "round": 0,
                                  "retry_after": 1.0, "global_hash": "0" * 64,
                                  "config": task_wire(f"{name}:net")}))
    phone = device(tmp_path / "state", hostile)
    with pytest.raises(ImportRefused) as refused:
        phone.step()
    phone.close()
    assert str(refused.value) == (
        f"task config: model '{name}:net': not imported: package '{name}' is not in the "
        "device's allow_imports (FederatedClient(allow_imports=...), pfl-client "
        "--allow-imports)")
    assert [f"{asked.method} {asked.path}" for asked in hostile.served] == ["GET /v1/task"]
    assert name not in sys.modules and not imported.exists()
    assert not (tmp_path / "state" / "pending.safetensors").exists()
    # the owner allows it: the same task then resolves (and imports the probe)
    allowed = device(tmp_path / "state", hostile, allow_imports=[name])
    algorithm = TaskConfig.from_wire(task_wire(f"{name}:net"), allowed.imports).build()
    assert algorithm.new_model()(torch.zeros(2, 1, 8, 8)).shape == (2, 10)
    assert imported.exists() and sys.modules[name].CALLS == ["net"]
    allowed.close()
