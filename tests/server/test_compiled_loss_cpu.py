"""``compile_loss`` on the CPU: one line without a C++ compiler; compiled for a whole run.

Without a compiler torch failed at the first step's compile with a multi-line InductorError
(exit 1) after the data was loaded. And torch counts its recompiles per code object, which
every vmapped function shares: FedRep's head and body programs each compile 4 widths plus the
first step's weight layout, 10 shapes, past torch's limit of 8. The run then trained every
later step eagerly (slower, the same numbers) and printed torch's warning even under
``--quiet``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from test_executors import config  # the executor seam's small digits run
from waiting import GUARD

from pflkit.sdk.run_config import AlgorithmConfig, DataConfig, TrainingConfig
from pflkit.server.simulator import Simulation

pytest.importorskip("torch._inductor")


def test_fedreps_two_programs_compile_every_shape_of_a_round(tmp_path, monkeypatch) -> None:
    torch._dynamo.reset()  # shapes compiled by other tests count against the same limit
    monkeypatch.setattr(torch._dynamo.config, "fail_on_recompile_limit_hit", True)
    run = config(executor="batched", compile_loss=True)
    # 8 clients of different sizes: widths 8, 4, 2 and 1 of the head and the body programs
    run = run.replace(rounds=1, eval_interval=1, checkpoint_interval=1,
                      data=DataConfig(dataset="digits", kind="dirichlet", num_clients=8,
                                      alpha=0.1, min_size=10),
                      algorithm=AlgorithmConfig("fedrep"),
                      training=TrainingConfig(clients_per_round=8, epochs=2, batch_size=10,
                                              lr=0.05))
    result = Simulation(run, tmp_path / "run", progress=False).run()
    assert result.final["rounds"] == 1


def test_no_cpp_compiler_is_one_line_before_anything_is_written(tmp_path) -> None:
    bin_dir = Path(sys.executable).parent  # PATH holds no g++ (nor cc, nor CXX): none found
    env = {k: v for k, v in os.environ.items() if k not in ("CXX", "CC")} | {"PATH": str(bin_dir)}
    done = subprocess.run(
        [str(bin_dir / "pfl-sim"), "--out", str(tmp_path / "run"), "--dataset", "digits",
         "--clients", "4", "--clients-per-round", "2", "--model", "twonn", "--rounds", "1",
         "--epochs", "1", "--executor", "batched", "--set", "execution.compile_loss=true",
         "--quiet"], env=env, capture_output=True, text=True, timeout=GUARD, check=False)
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stderr == ("error: execution.compile_loss: torch.compile needs a C++ compiler on "
                           "the CPU and found none (InvalidCxxCompiler: install g++ or set CXX)\n")
    assert not (tmp_path / "run").exists()
