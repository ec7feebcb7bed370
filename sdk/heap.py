"""glibc malloc's thresholds, set per process for what the process does with big buffers.

glibc serves a block of at least its mmap threshold with mmap (unmapped when freed) and hands
free memory at the top of the heap back to the kernel past its trim threshold; by default
both adapt (the mmap threshold rises to the largest block freed, up to 32 MB, the trim
threshold is twice it). Memory handed back is faulted in, page by page and zeroed, when it is
used again. Which way is right depends on the process:

- the server frees ~1 MB upload bodies and states and should give them back
  (:func:`return_large_buffers_to_the_os`);
- a training worker allocates and frees the same megabytes every step and should keep them
  (:func:`keep_freed_heap`).

Both are process-wide and only set in processes pflkit owns (never from code embedded in an
app). Off glibc (musl, macOS, Windows) nothing is changed.
"""

from __future__ import annotations

import ctypes
import platform
import sys

# mallopt(3) parameters (glibc's malloc.h); setting either one ends the adaptive rule
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD_MAX = 32 << 20  # the largest mmap threshold glibc accepts on 64-bit systems
WORKER_TRIM_THRESHOLD = 256 << 20  # free heap a training worker keeps beyond its peak


def _mallopt(*settings: tuple[int, int]) -> bool:
    """Apply (parameter, value) pairs with mallopt; False off glibc or if glibc refused one."""
    if not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc":
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return False
    return all(libc.mallopt(param, value) == 1 for param, value in settings)


def return_large_buffers_to_the_os() -> bool:
    """Serve and free every buffer of 128 KiB or more with mmap/munmap (the server).

    Upload bodies and global states are ~1 MB each. With the adaptive threshold, later ones
    came from per-thread heaps that stay resident (the worker's RSS kept the high-water mark
    of the busiest round, ~100 MB above idle with 200 concurrent uploads; measured in
    bench-server). A fixed threshold returns each body's pages when the request ends.
    """
    return _mallopt((M_MMAP_THRESHOLD, 128 * 1024))


def keep_freed_heap() -> bool:
    """Keep a training step's freed memory for the next step (Ray workers).

    Whether the adaptive rule trims every step depends on the heap's layout: a process whose
    dataset sits on its own heap (the simulator, a spawned process) seldom trims, while a Ray
    worker, whose client rows live in Ray's object store, did at every step: 600-900k minor
    page faults per six client fits of bench-scale (a) and 19-27% more CPU for the same fits
    (issue 22, results/scale_cpu_profile.md). With these thresholds blocks under 32 MB come
    from the heap and up to 256 MB of free heap stay mapped.
    """
    return _mallopt((M_MMAP_THRESHOLD, MMAP_THRESHOLD_MAX),
                    (M_TRIM_THRESHOLD, WORKER_TRIM_THRESHOLD))
