"""A run stored before pflkit refused unused settings still resumes, serves and reports.

pflkit now refuses a setting the chosen mode leaves unused (``trim_fraction`` under
``rule = "mean"``, ``alpha`` under ``kind = "iid"``). Earlier versions took them, and wrote
them into a run's ``config.toml``, its checkpoints' recorded settings and pfl-server's run
rows; such a value changed nothing, so reading it back gives the default with a warning
rather than a run that can no longer be resumed, served or reported.
"""

from __future__ import annotations

import logging

from service_harness import service_for
from sqlalchemy import update
from test_sim_s15_resume_config import config, runner, stopped_after_two_rounds

from pflkit.export.cli import app as export_app
from pflkit.sdk.rundir import RUN_CONFIG_KEY, RunDir
from pflkit.sdk.tensorio import load_state, read_metadata, save_state
from pflkit.server.orm import Run
from pflkit.server.service import build_service
from pflkit.server.simulator import Simulation
from pflkit.server.simulator_cli import app

STALE = ("alpha = 0.3", "alpha = 0.9")  # an iid deal never reads alpha


def as_an_older_pflkit_wrote_it(files: RunDir) -> None:
    """config.toml and the checkpoint's recorded settings, each holding an unused alpha."""
    text = files.config_file.read_text()
    assert STALE[0] in text
    files.config_file.write_text(text.replace(*STALE))
    meta = read_metadata(files.latest.read_bytes())
    assert STALE[0] in meta[RUN_CONFIG_KEY]
    save_state(files.latest, load_state(files.latest),
               meta | {RUN_CONFIG_KEY: meta[RUN_CONFIG_KEY].replace(*STALE)})


def test_a_run_folder_holding_an_unused_setting_resumes_to_the_same_weights(tmp_path, caplog):
    files = stopped_after_two_rounds(tmp_path)
    as_an_older_pflkit_wrote_it(files)
    with caplog.at_level(logging.WARNING):
        resumed = runner.invoke(app, ["--resume", str(files.path), "--quiet"])
    assert resumed.exit_code == 0, resumed.output
    assert "a stored run config's alpha = 0.9 has no effect" in caplog.text
    whole = Simulation(config(tmp_path / "data"), tmp_path / "whole", progress=False).run()
    final = load_state(files.latest)
    assert all(final[k].equal(whole.global_state[k]) for k in whole.global_state)


def test_a_server_run_row_holding_an_unused_setting_is_served_after_a_restart(tmp_path):
    service, clients = service_for(tmp_path, None)
    values = service.store.settings
    with service.store.transaction() as s:
        s.execute(update(Run).values(config_toml=Run.config_toml + "\n[aggregation]\n"
                                     "trim_fraction = 0.25\n"))
    restarted = build_service(values)  # a new process: nothing cached
    restarted.runs.ensure()
    status = restarted.runs.status(None)
    assert status["status"] == "active"
    assert "train" in {restarted.tasks.task(cid)["status"] for cid in clients}


def test_a_run_folder_holding_an_unused_setting_exports(tmp_path, caplog):
    files = stopped_after_two_rounds(tmp_path)
    as_an_older_pflkit_wrote_it(files)
    out = tmp_path / "export"
    with caplog.at_level(logging.WARNING):
        result = runner.invoke(export_app, ["--run", str(files.path), "--round", "2", "--client",
                                            "0", "--format", "onnx", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert (out / "model.onnx").is_file()
    assert "a stored run config's alpha = 0.9 has no effect" in caplog.text
