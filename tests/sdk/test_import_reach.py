"""An import path reaches only what the allowed package holds, not what it imported.

Before: with ``allow_imports = ["outer"]``, a task naming ``outer.nets:inner.net`` called
``inner.net`` (a package the device's owner never allowed, reached through the module that
``outer.nets`` imports), and ``outer.nets:__builtins__`` or ``Net.__init__`` walked private
attributes. Each probe records its calls, so "never called" is observed, not assumed.
"""

from __future__ import annotations

import sys

import pytest
from hostile_harness import device, json_answer

from pflkit.sdk.registry import ExtensionError, ImportPolicy
from pflkit.sdk.run_config import ConfigError, SimConfig
from pflkit.sdk.task_config import TaskConfig

INNER = '''\
from pflkit.sdk.models import two_nn

CALLS = []


def net(shape, num_classes):
    CALLS.append("net")
    return two_nn(shape, num_classes)
'''

OUTER = '''\
from json import dumps

import {inner}
from pflkit.sdk.models import two_nn


def own_net(shape, num_classes):
    return two_nn(shape, num_classes)


class Holder:
    net = staticmethod({inner}.net)
    own = staticmethod(own_net)
'''


@pytest.fixture
def packages(tmp_path, monkeypatch):
    """``outer_<n>`` (allowed) whose module imports ``inner_<n>`` (not allowed)."""
    suffix = tmp_path.name.replace("-", "_")
    outer, inner = f"outer_{suffix}", f"inner_{suffix}"
    (tmp_path / f"{inner}.py").write_text(INNER)
    (tmp_path / outer).mkdir()
    (tmp_path / outer / "__init__.py").write_text("")
    (tmp_path / outer / "nets.py").write_text(OUTER.format(inner=inner))
    monkeypatch.syspath_prepend(str(tmp_path))
    yield outer, inner
    for name in (inner, outer, f"{outer}.nets"):
        sys.modules.pop(name, None)


def task_wire(model: str) -> dict:
    return {"algorithm": "fedavg", "params": {}, "model": model, "input_shape": [1, 8, 8],
            "num_classes": 10, "seed": 0, "total_rounds": 2,
            "lr_schedule": {"lr": 0.1, "decay": 1.0},
            "local": {"epochs": 1, "batch_size": 4, "momentum": 0.0, "weight_decay": 0.0}}


def test_a_task_cannot_reach_a_module_the_allowed_package_imported(packages):
    outer, inner = packages
    device = ImportPolicy.allowing([outer], "allow_imports")
    ref = f"{outer}.nets:{inner}.net"
    task = TaskConfig.from_wire(task_wire(ref), device)  # the name's package is allowed
    with pytest.raises(ExtensionError) as refused:
        task.build().new_model()
    assert str(refused.value) == (f"model '{ref}': '{inner}' is the module {inner}: name a "
                                  "module before the ':' of an import path")
    assert sys.modules[inner].CALLS == []
    # the same walk from the package to its own submodule: named before ':' instead
    with pytest.raises(ExtensionError, match=f"'nets' is the module {outer}.nets: name a"):
        TaskConfig.from_wire(task_wire(f"{outer}:nets.Holder"), device).build().new_model()


@pytest.mark.parametrize("attr,private", [("__builtins__", "__builtins__"),
                                          ("Holder.__init__", "__init__"),
                                          ("Holder._x", "_x")])
def test_a_private_attribute_is_refused_before_importing(packages, attr, private):
    outer, inner = packages
    text = (f'rounds = 2\n[data]\ndataset = "synthetic"\nnum_clients = 4\n'
            f'[model]\nname = "{outer}.nets:{attr}"\n')
    with pytest.raises(ConfigError) as refused:
        SimConfig.from_toml(text)  # pfl-sim's own config: the same rule as on a device
    assert str(refused.value) == (f"model.name: model '{outer}.nets:{attr}': '{private}' is "
                                  "private: an import path names a public attribute")
    assert f"{outer}.nets" not in sys.modules and inner not in sys.modules


def test_public_attributes_of_the_allowed_package_still_resolve(packages):
    """A dotted attribute of a class the package defines (``Holder.own``) still resolves."""
    outer, inner = packages
    device = ImportPolicy.allowing([outer], "allow_imports")
    task = TaskConfig.from_wire(task_wire(f"{outer}.nets:Holder.own"), device)
    assert task.build().new_model().head.out_features == 10
    assert sys.modules[inner].CALLS == []


@pytest.mark.parametrize("attr,home", [("Holder.net", "inner"), ("dumps", "json")])
def test_a_function_another_package_defines_is_not_reached_through_the_allowed_one(
        packages, attr, home):
    """``from json import dumps`` or a class attribute holding inner's function: not outer's."""
    outer, inner = packages
    device = ImportPolicy.allowing([outer], "allow_imports")
    home = inner if home == "inner" else home
    with pytest.raises(ExtensionError, match=f"^model '{outer}.nets:{attr}': '{attr}' is "
                       f"{home}'s, imported by {outer}.nets: name it in the package that "
                       "defines it$"):
        TaskConfig.from_wire(task_wire(f"{outer}.nets:{attr}"), device).build().new_model()
    assert sys.modules[inner].CALLS == []


def test_a_device_refuses_a_run_whose_model_it_cannot_build_before_it_enrolls(
        packages, tmp_path, hostile):
    """The preview names a model reached through a module: the token stays unspent."""
    outer, inner = packages
    ref = f"{outer}.nets:{inner}.net"
    hostile.add(json_answer(200, {"run_id": 1, "config": task_wire(ref)}))
    with pytest.raises(ExtensionError, match=f"'{inner}' is the module {inner}"):
        device(tmp_path / "state", hostile, enrolled=False, token="pfe_" + "a" * 40,
               allow_imports=[outer])
    assert [f"{asked.method} {asked.path}" for asked in hostile.served] == \
        ["GET /v1/task/preview"]
    assert not (tmp_path / "state" / "credentials.json").exists()
    assert sys.modules[inner].CALLS == []
