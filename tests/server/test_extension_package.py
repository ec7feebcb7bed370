"""A user's own package extends pflkit with no pflkit file changed (issue #16 item 4).

tests/ext_pkg is such a package (``sensorkit``): a tabular dataset (12 features), a non-image
model (an MLP) and a fourth personalization method (PriorShift, one file). It is installed
with pip into a temporary folder that only these tests put on the Python path, so pflkit can
reach it only through what a user writes: entry point names (``sensors``, ``sensornet``,
``prior_shift``, from the installed package's metadata) or import paths
(``sensorkit.nets:SensorNet``). It then runs through pfl-sim, pfl-export (with its parity
checks), and a 2-round ``pfl-server --workers 2`` run with a ``pfl-client`` process and an
in-process ``FederatedClient``. The server imports the package because its operator allowed it
(``--allow-imports``); the in-process device allows it too, the ``pfl-client`` process needs
nothing: its import paths are the targets of the package's installed entry points.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import torch
from server_harness import BIN, client_data_dirs, server_global, simulated_global, spawn_client
from waiting import GUARD

from pflkit.sdk.client import FederatedClient, RetryPolicy, load_client_data

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "tests" / "ext_pkg"

SIM_CONFIG = """\
seed = 0
rounds = 3
eval_interval = 3
checkpoint_interval = 3

[data]
dataset = "sensors"          # entry points of the installed package
kind = "dirichlet"
num_clients = 6
alpha = 0.5
test_fraction = 0.25

[model]
name = "sensornet"

[algorithm]
name = "prior_shift"

[algorithm.params]
bias_steps = 10

[training]
clients_per_round = 3
epochs = 1
batch_size = 32
lr = 0.1
"""

SERVER_CONFIG = """\
seed = 1
rounds = 2
eval_interval = 2

[data]
dataset = "sensorkit.data:SENSORS"   # import paths this time
kind = "iid"
num_clients = 2

[model]
name = "sensorkit.nets:SensorNet"

[algorithm]
name = "sensorkit.methods:PriorShift"

[training]
clients_per_round = 2
epochs = 1
batch_size = 32
lr = 0.1
"""


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """sensorkit installed (pip, no dependencies) into a folder of its own."""
    root = tmp_path_factory.mktemp("sensorkit")
    source = root / "src"
    shutil.copytree(PACKAGE, source)  # pip builds in the source tree: not in the repository's
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps",
                    "--no-build-isolation", "--target", str(root / "site"), str(source)],
                   check=True)
    return root / "site"


@pytest.fixture
def on_path(site, monkeypatch) -> Path:
    """The package visible to this process and to every process it starts."""
    monkeypatch.setenv("PYTHONPATH", str(site))
    monkeypatch.syspath_prepend(str(site))
    return site


def test_pflkit_does_not_know_the_package():
    mentions = [p for folder in ("sdk", "server", "export") for p in (ROOT / folder).rglob("*.py")
                if "sensorkit" in p.read_text()]
    assert mentions == []


@pytest.mark.parametrize(("name", "value", "rule"), [("bias_lr", -1, r"in \(0, 10\], got -1.0"),
                                                     ("bias_steps", 0, r"in \[1, 10000\], got 0")])
def test_the_example_method_declares_each_range_in_its_annotation(on_path, name, value, rule):
    """docs/extending.md shows this file as the way to write a method: ranges declared once,
    no range checks of its own in ``__post_init__``; the refusal is pflkit's one line."""
    from sensorkit.methods import PriorShiftParams

    from pflkit.sdk.algorithms.base import check_algorithm

    assert "__post_init__" not in vars(PriorShiftParams)
    with pytest.raises(ValueError, match=rf"^sensorkit.methods:PriorShift: hyperparameter "
                                         rf"'{name}' must be {rule}$"):
        check_algorithm("sensorkit.methods:PriorShift", {name: value})


def test_pfl_sim_then_pfl_export_with_entry_point_names(on_path, tmp_path):
    (tmp_path / "run.toml").write_text(SIM_CONFIG)
    sim = subprocess.run([str(BIN / "pfl-sim"), "--config", "run.toml", "--out", "run",
                          "--quiet"], cwd=tmp_path, capture_output=True, text=True, timeout=GUARD)
    assert sim.returncode == 0, sim.stderr
    final = json.loads((tmp_path / "run" / "final.json").read_text())
    assert 0.0 <= final["clients"]["summary"]["own_top1_mean"] <= 1.0
    assert (tmp_path / "run" / "partition.safetensors").is_file()

    export = subprocess.run([str(BIN / "pfl-export"), "--run", "run", "--client", "1"],
                            cwd=tmp_path, capture_output=True, text=True, timeout=GUARD)
    assert export.returncode == 0, export.stderr
    card = json.loads((tmp_path / "run" / "exports" / "client1" / "model_card.json").read_text())
    assert card["classes"] == ["idle", "walking", "running", "cycling"]
    assert card["preprocessing"]["kind"] == "standardize"
    assert len(card["preprocessing"]["mean"]) == 12
    assert {p["file"] for p in card["parity"]} >= {"model.onnx", "model.pte"}
    assert all(p["max_abs_diff"] < 1e-4 for p in card["parity"])


def test_server_with_two_workers_and_two_sdk_clients_with_import_paths(on_path, make_server,
                                                                      tmp_path):
    server = make_server(SERVER_CONFIG, "--min-enrolled", "2", "--workers", "2",
                         "--allow-imports", "sensorkit")  # the operator allows the package
    dirs = client_data_dirs(tmp_path / "clients", SERVER_CONFIG)
    assert load_client_data(dirs[0]).x.shape[1:] == (12,)  # tabular rows, not images
    process = spawn_client(server, dirs[0], server.token(0))
    device = FederatedClient(server.url, dirs[1] / ".state", load_client_data(dirs[1]),
                             token=server.token(1), retry=RetryPolicy(cap=1.0, max_elapsed=GUARD),
                             allow_imports=["sensorkit"])
    thread = threading.Thread(target=device.run)
    thread.start()
    status = server.wait_for(lambda s: s["status"] == "finished")
    thread.join(GUARD)
    assert process.wait(GUARD) == 0
    assert status["algorithm"] == "sensorkit.methods:PriorShift"
    assert [r["metrics"]["participants"] for r in status["history"]] == [2, 2]
    expected = simulated_global(SERVER_CONFIG, tmp_path / "sim")
    got = server_global(server, status["global_hash"])
    assert sorted(got) == sorted(expected)
    for key in expected:
        assert torch.equal(got[key], expected[key]), key
    model = device.personalized_model()
    assert model(torch.zeros(3, 12)).shape == (3, 4)
    assert "bias" in dict(model.named_buffers())
    device.close()


def test_a_method_with_its_own_choice_exports_it_as_a_runtime_input(on_path, tmp_path):
    """scaled_prior declares ``strength`` (no pflkit file names it): --choice, card, parity."""
    (tmp_path / "run.toml").write_text(SIM_CONFIG.replace('name = "prior_shift"',
                                                          'name = "scaled_prior"'))
    sim = subprocess.run([str(BIN / "pfl-sim"), "--config", "run.toml", "--out", "run",
                          "--quiet"], cwd=tmp_path, capture_output=True, text=True, timeout=GUARD)
    assert sim.returncode == 0, sim.stderr

    def export(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(BIN / "pfl-export"), "--run", "run", "--client", "1", *args],
                              cwd=tmp_path, capture_output=True, text=True, timeout=GUARD)

    done = export("--choice", "strength=runtime", "--out", "rt")
    assert done.returncode == 0, done.stderr
    card = json.loads((tmp_path / "rt" / "model_card.json").read_text())
    assert card["inputs"][1] == {"name": "strength", "shape": [1], "dtype": "float32",
                                 "range": [0.0, 2.0], "default": 1.0, "nan": 1.0}
    assert card["mixture"]["choice"] == {"strength": "runtime"}
    assert {p["file"] for p in card["parity"]} == {"model.onnx", "model.pte"}
    for entry in card["parity"]:
        assert entry["runtime_input"] == "strength" and entry["runtime_value"] == 1.0
        assert entry["values_checked"] == [0.0, 0.74, 1.0, 2.0]
        assert entry["clamp_checked"] == ["-0.5", "2.5", "-inf", "inf", "nan"]
    baked = export("--choice", "strength=0.5", "--format", "onnx", "--out", "baked")
    assert baked.returncode == 0, baked.stderr
    card = json.loads((tmp_path / "baked" / "model_card.json").read_text())
    assert len(card["inputs"]) == 1 and card["mixture"]["choice"] == {"strength": 0.5}
    for args, message in ((["--choice", "strength=3"], "strength must be a number in [0, 2]"),
                          (["--choice", "lam=0.3"], "scaled_prior declares no such choice "
                                                    "(scaled_prior's choices: strength)"),
                          (["--lambda", "0.3"], "--lambda: scaled_prior declares no choice")):
        refused = export(*args, "--format", "onnx", "--out", "x")
        assert refused.returncode == 2 and refused.stderr.strip().count("\n") == 0, refused
        assert message in refused.stderr, refused.stderr
    assert not (tmp_path / "x").exists()


def test_devices_draw_a_dropout_models_masks_as_pfl_sim_does(on_path, make_server, tmp_path):
    """Dropout masks come from the client's round seed on a device too, not from its process.

    Two in-process devices (threads sharing torch's generator) trained other weights than
    pfl-sim's run of the same config, which draws from (seed, client, round).
    """
    config = SERVER_CONFIG.replace('"sensorkit.nets:SensorNet"',
                                   '"sensorkit.nets:DropoutSensorNet"').replace(
        '"sensorkit.methods:PriorShift"', '"fedavg"')
    server = make_server(config, "--min-enrolled", "2", "--allow-imports", "sensorkit")
    dirs = client_data_dirs(tmp_path / "clients", config)
    devices = [FederatedClient(server.url, dirs[c] / ".state", load_client_data(dirs[c]),
                               token=server.token(c),
                               retry=RetryPolicy(cap=1.0, max_elapsed=GUARD),
                               allow_imports=["sensorkit"]) for c in (0, 1)]
    threads = [threading.Thread(target=device.run) for device in devices]
    for thread in threads:
        thread.start()
    status = server.wait_for(lambda s: s["status"] == "finished")
    for thread in threads:
        thread.join(GUARD)
    expected = simulated_global(config, tmp_path / "sim")
    got = server_global(server, status["global_hash"])
    for key in expected:
        assert torch.equal(got[key], expected[key]), key
    for device in devices:
        device.close()
