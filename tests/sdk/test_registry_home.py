"""An import path reaches C code only where the named package defines or exports it (s13).

Before: a Python function or class another package defines was refused through an allowed
package (``allowed.nets:dumps`` after ``from json import dumps``), but C functions were not
checked at all: ``allowed.nets:system`` after ``from os import system`` resolved to
``posix.system``, and ``allowed.nets:ev`` (``ev = eval``) to the builtin ``eval``, for a device
whose owner allowed only ``allowed``. A module's ``__all__`` (its author's public API) and data
the module built (an instance) are its own: ``os:getcwd`` still reaches its checks.
"""

from __future__ import annotations

import sys

import pytest
from test_import_reach import task_wire

from pflkit.sdk.registry import ExtensionError, ImportPolicy, import_path
from pflkit.sdk.run_config import ConfigError, SimConfig
from pflkit.sdk.task_config import TaskConfig

NETS = '''\
from functools import partial
from operator import mul
from os import system

from pflkit.sdk.models import two_nn

ev = eval
ITEMS = []


def own(shape, num_classes):
    return two_nn(shape, num_classes)


class Net:
    @classmethod
    def make(cls, shape, num_classes):
        return two_nn(shape, num_classes)


built = partial(own)
'''

EXPORTS = '''\
from os import getcwd

__all__ = ["getcwd"]
'''


@pytest.fixture
def allowed(tmp_path, monkeypatch):
    """``allowed_<n>`` with a module importing C functions and one exporting one."""
    name = f"allowed_{tmp_path.name.replace('-', '_')}"
    (tmp_path / name).mkdir()
    (tmp_path / name / "__init__.py").write_text("")
    (tmp_path / name / "nets.py").write_text(NETS)
    (tmp_path / name / "exports.py").write_text(EXPORTS)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield name
    for module in (name, f"{name}.nets", f"{name}.exports"):
        sys.modules.pop(module, None)


@pytest.mark.parametrize("attr,home", [("system", "posix"), ("ev", "builtins"),
                                       ("mul", "_operator"), ("ITEMS.append", "builtins")])
def test_a_c_function_another_package_defines_is_refused_on_a_device(allowed, attr, home):
    device = ImportPolicy.allowing([allowed], "allow_imports")
    ref = f"{allowed}.nets:{attr}"
    task = TaskConfig.from_wire(task_wire(ref), device)  # the name's package is allowed
    with pytest.raises(ExtensionError) as refused:
        task.build()
    assert str(refused.value) == (f"model '{ref}': '{attr}' is {home}'s, imported by "
                                  f"{allowed}.nets: name it in the package that defines it")


def test_pfl_sim_applies_the_same_rule_to_its_own_config(allowed):
    text = (f'rounds = 2\n[data]\ndataset = "synthetic"\nnum_clients = 4\n'
            f'[model]\nname = "{allowed}.nets:system"\n')
    with pytest.raises(ConfigError, match=f"^model.name: model '{allowed}.nets:system': "
                       "'system' is posix's, imported by "):
        SimConfig.from_toml(text)


def test_what_the_package_defines_builds_or_exports_still_resolves(allowed):
    device = ImportPolicy.allowing([allowed], "allow_imports")
    for attr in ("own", "Net.make", "built"):  # its function, its class's method, its partial
        task = TaskConfig.from_wire(task_wire(f"{allowed}.nets:{attr}"), device)
        assert task.build().new_model().head.out_features == 10
    from os import getcwd
    assert import_path("model", f"{allowed}.exports:getcwd") is getcwd  # listed in __all__
    # the standard library's own re-exports: os exports posix's getcwd, operator _operator's mul
    assert import_path("model", "os:getcwd") is getcwd
    with pytest.raises(ExtensionError, match="^model 'operator:mul' built a tuple, not a "):
        TaskConfig.from_wire(task_wire("operator:mul"), ImportPolicy.allowing(
            ["operator"], "allow_imports")).build().new_model()


def test_torch_builders_resolve_to_their_own_checks():
    """torch's C functions name torch as their module: a config naming them reaches its checks."""
    with pytest.raises(ConfigError, match="^model.name: model 'torch.nn:Linear' is the class "
                                          "Linear, not a SplitModel subclass"):
        SimConfig.from_toml('rounds = 2\n[data]\ndataset = "synthetic"\nnum_clients = 4\n'
                            '[model]\nname = "torch.nn:Linear"\n')
    import torch
    assert import_path("model", "torch:zeros") is torch.zeros
