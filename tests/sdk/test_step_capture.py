"""The step replayer's segments, and its one-line error when a step cannot be captured.

Capture itself needs CUDA (tests/server/test_gpu.py); here torch.cuda's stream and graph entry
points are stand-ins, so the error path runs on the CPU.
"""

import contextlib

import pytest
import torch

from pflkit.sdk import step_capture
from pflkit.sdk.step_capture import CaptureError, cuda_graphs, run_steps, segments


def test_segments_are_runs_of_equal_active_counts():
    assert segments([3, 3, 3, 2, 1, 1]) == [(3, 3), (2, 1), (1, 2)]
    assert segments([]) == []


def test_without_capture_every_step_runs_once_in_order():
    seen = []
    with cuda_graphs(True):  # on the CPU nothing is captured
        run_steps(seen.append, [2, 2, 2, 2, 2, 1], torch.device("cpu"))
    assert seen == [2, 2, 2, 2, 2, 1]


class _Stream:
    def wait_stream(self, other: object) -> None:
        pass


def test_a_step_that_cannot_be_captured_names_the_switch(monkeypatch):
    def refuse(*args, **kwargs):
        raise RuntimeError("operation not permitted when stream is capturing\nmore detail")

    for name, value in (("Stream", lambda device: _Stream()),
                        ("current_stream", lambda device: _Stream()),
                        ("stream", lambda s: contextlib.nullcontext()),
                        ("graph_pool_handle", lambda: None), ("CUDAGraph", object),
                        ("graph", refuse)):
        monkeypatch.setattr(torch.cuda, name, value)
    seen = []
    with cuda_graphs(True), pytest.raises(CaptureError) as caught:
        run_steps(seen.append, [1] * step_capture.MIN_SEGMENT, torch.device("cuda"))
    assert str(caught.value) == (
        "a batched step could not be captured as a CUDA graph (operation not permitted when "
        "stream is capturing); set execution.cuda_graphs = false to run the steps eagerly")
    assert seen == [1]  # the warm-up step ran; nothing after the failed capture
