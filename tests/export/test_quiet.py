"""Known torch / ExecuTorch noise is dropped; every other line of stderr still gets through."""

from __future__ import annotations

import logging
import os

from pflkit.export.quiet import PYTREE_NOISE, native_noise_dropped


def test_only_the_runtimes_known_native_lines_are_dropped(capfd):
    lines = [b"[cpuinfo_utils.cpp:71] Reading file /sys/devices/soc0/image_version\n",
             b"real error: the program is corrupt\n",
             b"[threadpool.cpp:66] Resetting threadpool to 2 threads.\n",
             b"[threadpool.cpp:70] Failed to create threadpool\n",
             b"[cpuinfo_utils.cpp:125] CPU info and manual query on # of cpus dont match.\n"]
    with native_noise_dropped():
        for line in lines:
            os.write(2, line)
    os.write(2, b"[threadpool.cpp:66] Resetting threadpool to 1 threads.\n")  # outside: kept
    assert capfd.readouterr().err == ("real error: the program is corrupt\n"
                                      "[threadpool.cpp:70] Failed to create threadpool\n"
                                      "[threadpool.cpp:66] Resetting threadpool to 1 threads.\n")


def test_only_the_pytree_enum_warning_is_dropped(caplog):
    log = logging.getLogger("torch.utils._pytree")
    with caplog.at_level(logging.WARNING, logger="torch.utils._pytree"):
        log.warning("%s is an Enum subclass ... Calling %s", "<enum 'KernelPreference'>",
                    PYTREE_NOISE)
        log.warning("something else about pytrees")
    assert [r.getMessage() for r in caplog.records] == ["something else about pytrees"]
