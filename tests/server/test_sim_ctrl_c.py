"""Ctrl-C in a pfl-sim run says how to go on: its committed rounds stay for ``--resume``.

A first-time user's Ctrl-C ended the run with exit 130 and not a word; running the same
command again was then refused for the files the stopped run had left.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from pathlib import Path

from ctrl_c import restore_ctrl_c
from waiting import GUARD, wait_until

from pflkit.sdk.rundir import RunDir

PFL_SIM = str(Path(sys.executable).parent / "pfl-sim")


def test_ctrl_c_names_the_committed_rounds_and_the_resume_command(tmp_path):
    out = tmp_path / "run"
    sim = subprocess.Popen([PFL_SIM, "--out", str(out), "--dataset", "digits", "--clients", "3",
                            "--model", "twonn", "--rounds", "100000", "--epochs", "0",
                            "--eval-interval", "100000", "--set", "training.lr_decay=1",
                            "--quiet"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           preexec_fn=restore_ctrl_c)
    try:
        wait_until(lambda: RunDir(out).latest.is_file() or sim.poll() is not None,
                   "the first committed round")
        assert sim.poll() is None, sim.communicate()
        sim.send_signal(signal.SIGINT)
        _, stderr = sim.communicate(timeout=GUARD)
    finally:
        sim.kill()
    assert sim.returncode == 130, stderr
    said = re.fullmatch(r"pfl-sim: stopped by Ctrl-C with (\d+) rounds? committed; continue "
                        rf"with: pfl-sim --resume {re.escape(str(out))}", stderr.strip())
    assert said, stderr
    assert int(said[1]) == RunDir(out).rounds_done() >= 1
