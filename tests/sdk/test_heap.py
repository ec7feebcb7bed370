"""malloc's thresholds: the server gives big buffers back, a Ray worker keeps a step's memory.

Each check runs in a fresh interpreter (the thresholds are process-wide and cannot be unset)
and counts the minor page faults of a step-like loop: three 24 MB tensors allocated, filled
and freed, five times. It starts from the server's fixed setting, where every such block is
mapped and unmapped: under glibc's adaptive default whether a step's memory is handed back
depends on the heap's layout, which differs from run to run.
"""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

from pflkit.sdk.heap import keep_freed_heap, return_large_buffers_to_the_os

GLIBC = sys.platform.startswith("linux") and platform.libc_ver()[0] == "glibc"

STEPS = """
import torch
from pflkit.sdk.heap import return_large_buffers_to_the_os

def faults():
    stat = open("/proc/self/stat").read()
    return int(stat[stat.rindex(")") + 2:].split()[7])  # minflt

def steps(n=5):
    before = faults()
    for _ in range(n):
        kept = [torch.ones(6 << 20) for _ in range(3)]  # 3 x 24 MB, every page written
        del kept
    return faults() - before

assert return_large_buffers_to_the_os()
steps(1)
print(steps())
"""

WORKER = """
from pflkit.sdk.algorithms.base import make_algorithm
from pflkit.sdk.algorithms.contract_types import LocalTraining, ModelFactory
from pflkit.server.ray_executor import ClientWorker

ClientWorker(make_algorithm("fedavg", ModelFactory("twonn", (1, 8, 8), 10), LocalTraining()),
             {}, "cpu", 1, "fp32", False, False)  # in this process, not on Ray
steps(3)  # the heap settles under the new thresholds
print(steps())
"""

PAGES_WRITTEN = 5 * 3 * (24 << 20) // 4096


def page_faults(script: str) -> list[int]:
    """The fault counts a script printed, one per line."""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         check=True).stdout
    return [int(line) for line in out.split()]


def test_the_thresholds_are_set_on_glibc_and_left_alone_elsewhere():
    assert return_large_buffers_to_the_os() is GLIBC
    assert keep_freed_heap() is GLIBC


@pytest.mark.skipif(not GLIBC, reason="malloc's thresholds are glibc's")
def test_a_ray_worker_keeps_the_memory_a_step_freed_for_the_next_step():
    returned, kept = page_faults(STEPS + WORKER)
    assert returned >= PAGES_WRITTEN  # the server's setting: every block faulted in again
    # once the worker is built the steps reuse what they freed (while the heap settles, a
    # block may still be faulted in once: 6,144 pages, seen in 2 of 6 runs)
    assert kept < PAGES_WRITTEN // 10
