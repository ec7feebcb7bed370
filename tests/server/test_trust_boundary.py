"""A run config chooses no code and reads no file its operator did not allow (issue #21 item 1).

Before: ``model.name = "os:getcwd"`` in ``POST /v1/runs`` was imported and called (500) and so
was any import path; a device imported whatever module its task named; ``data.root`` was read
anywhere, and its error message told an admin which server paths exist. Probe modules record
each process that imports them (one file per module and process id).
"""

from __future__ import annotations

import os
import subprocess

import numpy as np
import pytest
from server_harness import ADMIN, BIN, client_data_dirs, run_toml, spawn_client
from waiting import GUARD

PROBE = """\
import os
import pathlib

pathlib.Path(os.environ["PFLKIT_PROBE_MARKS"], f"{__name__}.{os.getpid()}").touch()

from pflkit.sdk.models import two_nn


def net(shape, num_classes):
    return two_nn(shape, num_classes)
"""

SERVER_SETTING = "the server's allow_imports (--allow-imports, PFL_SERVER_ALLOW_IMPORTS)"
DATASET_DIR = "the server's dataset_dir (--dataset-dir, PFL_SERVER_DATASET_DIR)"


def with_dataset(text: str, dataset: str, root: str | None = None) -> str:
    line = f'dataset = "{dataset}"\n' + (f"root = {root!r}\n" if root is not None else "")
    return text.replace('dataset = "synthetic"\n', line)


def test_the_server_and_its_devices_import_only_what_their_owners_allowed(make_server, tmp_path,
                                                                            monkeypatch):
    marks, datasets = tmp_path / "marks", tmp_path / "datasets"
    marks.mkdir()
    (datasets / "rows").mkdir(parents=True)
    rng = np.random.default_rng(0)
    for split, n in (("train", 40), ("test", 10)):
        np.save(datasets / "rows" / f"{split}_x.npy", rng.normal(size=(n, 12)).astype("f4"))
        np.save(datasets / "rows" / f"{split}_y.npy", rng.integers(0, 3, size=n))
    monkeypatch.setenv("PFLKIT_PROBE_MARKS", str(marks))
    config = run_toml(rounds=1, num_clients=2, per_round=1)
    server = make_server(config.replace('name = "twonn"', 'name = "probe_ok:net"'),
                         "--allow-imports", "probe_ok,os", "--dataset-dir", str(datasets),
                         "--min-enrolled", "1", start=False)
    for name in ("probe_ok", "probe_no"):
        (server.root / f"{name}.py").write_text(PROBE)
    server.start()

    # a device that can import probe_ok but was not allowed to: refused before importing it
    monkeypatch.setenv("PYTHONPATH", str(server.root))
    data = client_data_dirs(tmp_path / "clients", config)[0]
    device = spawn_client(server, data, server.token())
    assert device.wait(GUARD) == 2
    assert (data / "client.log").read_text().strip() == (
        "pfl-client: task config: model 'probe_ok:net': not imported: package 'probe_ok' is "
        "not in the device's allow_imports (FederatedClient(allow_imports=...), pfl-client "
        "--allow-imports)")
    assert not (marks / f"probe_ok.{device.pid}").exists()
    status = server.status()  # nothing uploaded (whether it enrolled first or not)
    assert status["rounds_done"] == 0 and not (status["current_round"] or {}).get("received")

    with server.admin() as http:
        http.post(f"/v1/runs/{status['id']}/stop").raise_for_status()
        refused = {
            config.replace("twonn", "probe_no:net"):
                f"model.name: model 'probe_no:net': not imported: package 'probe_no' is not in "
                f"{SERVER_SETTING}",
            config.replace("twonn", "shutil:rmtree"):
                f"model.name: model 'shutil:rmtree': not imported: package 'shutil' is not in "
                f"{SERVER_SETTING}",
            config.replace("twonn", "os:getcwd"):  # allowed, and not a model: was a 500
                "model.name: model 'os:getcwd' is not a callable (input_shape, num_classes) -> "
                "SplitModel (TypeError: too many positional arguments)",
            with_dataset(config, "os:getcwd"):
                "data.dataset: dataset 'os:getcwd' is not a DatasetSource or a function (root, "
                "seed) -> Dataset (TypeError: got an unexpected keyword argument 'root')",
            config.replace('name = "fedavg"', 'name = "os:getcwd"'):
                "algorithm.name: algorithm 'os:getcwd' is not a subclass of "
                "pflkit.sdk.algorithms.Algorithm",
        }
        # outside the dataset folder, existing or not: the same answer, nothing about the files
        for root in ("/etc", "/no/such/folder", "../..", "rows/../../marks", str(server.root)):
            refused[with_dataset(config, "folder", root)] = (
                f"data.root: {root!r} is not inside {DATASET_DIR}")
        for text, detail in refused.items():
            reply = http.post("/v1/runs", json={"config_toml": text})
            assert (reply.status_code, reply.json()) == (422, {"detail": f"run config: {detail}"})
        assert sorted(p.name.split(".")[0] for p in marks.iterdir()) == ["probe_ok"]
        created = http.post("/v1/runs", json={"config_toml": with_dataset(
            config, "folder", str(datasets / "rows"))})
        assert created.status_code == 201, created.text
        http.post(f"/v1/runs/{created.json()['id']}/stop").raise_for_status()
        relative = http.post("/v1/runs", json={"config_toml": with_dataset(config, "folder",
                                                                            "rows")})
        assert relative.status_code == 201, relative.text


def test_pfl_server_refuses_a_run_config_naming_code_it_was_not_allowed_in_one_line(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("PFL_SERVER_")}
    (tmp_path / "admin").write_text(ADMIN)
    (tmp_path / "admin").chmod(0o600)  # a token file others may read gets a warning
    base = [str(BIN / "pfl-server"), "serve", "--data-dir", str(tmp_path / "data"),
            "--run-config", str(tmp_path / "run.toml"), "--admin-token-file",
            str(tmp_path / "admin")]
    (tmp_path / "run.toml").write_text(run_toml(model="os:getcwd"))
    for flags, message in [
        ([], f"model.name: model 'os:getcwd': not imported: package 'os' is not in "
             f"{SERVER_SETTING}"),
        (["--allow-imports", "os"], "model.name: model 'os:getcwd' is not a callable "
         "(input_shape, num_classes) -> SplitModel (TypeError: too many positional arguments)"),
        (["--allow-imports", "os", "--set", "model.name='twonn'", "--set", "data.root='/etc'"],
         f"run config: data.root: this server reads no dataset files: set {DATASET_DIR}"),
    ]:
        done = subprocess.run([*base, *flags], capture_output=True, text=True, env=env,
                              timeout=GUARD)
        assert (done.returncode, done.stderr.strip()) == (2, f"pfl-server: {message}")


def test_code_of_an_allowed_package_that_fails_while_building_is_a_422_not_a_500(tmp_path,
                                                                                  monkeypatch):
    """``os:makedirs`` takes two arguments, so only the call tells: its TypeError was a 500."""
    from pflkit.sdk.registry import ImportPolicy
    from pflkit.server.errors import Invalid
    from pflkit.server.runs import RunRules, prepare_run

    (tmp_path / "probe_boom.py").write_text(
        "def net(shape, num_classes):\n    raise RuntimeError('boom\\n at line 2')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    rules = RunRules(imports=ImportPolicy.allowing(["os", "probe_boom"], "allow_imports"))
    for model, detail in [("os:makedirs", "TypeError: "),
                          ("probe_boom:net", "RuntimeError: boom at line 2)")]:
        with pytest.raises(Invalid) as refused:
            prepare_run(run_toml(model=model), tmp_path / "blobs", rules)
        assert refused.value.status == 422
        assert refused.value.message.startswith("run config: building the run failed (")
        assert detail in refused.value.message and "\n" not in refused.value.message
