"""Every process a test spawns runs torch with the test process's thread count (conftest.py)."""

from __future__ import annotations

import subprocess
import sys

import torch


def test_spawned_processes_run_the_same_torch_threads_as_the_test():
    probe = "import torch; print(torch.get_num_threads())"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          check=True)
    assert int(done.stdout) == torch.get_num_threads() == 1
