"""A round whose fit reports what the server refuses is refused on the device, before it is kept.

Before: a method (the device's owner allowed its import path) whose fit reported a metric name
over 64 characters, more than 64 metrics, or a ``num_samples`` that is no integer in
[0, 10^9], had its round persisted and uploaded: the server refused it (400 or 422), and every
later step re-sent the kept round and was refused again until the round closed. The Java
client refuses such a result when it is made (``RoundTrainer.Result``); the Python SDK now
refuses it in one line before writing the pending round. And a report within the rules whose
names lie outside ASCII (JSON-escaped, up to 12 characters each) is no longer refused for its
length. Real pfl-server on loopback.
"""

from __future__ import annotations

import sys

import pytest
import torch
from server_harness import run_toml
from waiting import GUARD

from pflkit.sdk.client import FederatedClient, RetryPolicy
from pflkit.sdk.data.tensors import LabeledTensors
from pflkit.sdk.protocol import round_report

METHOD = '''\
from dataclasses import replace

from pflkit.sdk.algorithms.fedavg import FedAvg, FedAvgTraining


class Training(FedAvgTraining):
    def fit(self, global_state, client_state, data, ctx):
        result = super().fit(global_state, client_state, data, ctx)
        return replace(result, num_samples={num_samples}, metrics={metrics})


class Reporting(FedAvg):
    name = "reporting"
    Training = Training
'''


def reporting_device(make_server, tmp_path, monkeypatch, num_samples: str, metrics: str):
    """A server running ``Reporting`` (FedAvg whose fit reports these) and one device."""
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "reporting.py").write_text(METHOD.format(num_samples=num_samples,
                                                        metrics=metrics))
    monkeypatch.setenv("PYTHONPATH", str(package))  # the server process imports it too
    monkeypatch.syspath_prepend(str(package))
    monkeypatch.delitem(sys.modules, "reporting", raising=False)  # another case's method
    server = make_server(run_toml("reporting:Reporting", rounds=1, per_round=1),
                         "--min-enrolled", "1", "--allow-imports", "reporting")
    generator = torch.Generator().manual_seed(0)
    rows = LabeledTensors(torch.rand(20, 1, 28, 28, generator=generator), torch.arange(20) % 10)
    device = FederatedClient(server.url, tmp_path / "device", rows, token=server.token(),
                             retry=RetryPolicy(cap=0.5, max_elapsed=GUARD),
                             allow_imports=["reporting"])
    server.wait_for(lambda s: s["current_round"] is not None)
    return server, device


@pytest.mark.parametrize(("num_samples", "metrics", "problem"), [
    ("len(data)", '{"x" * 65: 1.0}', "metric names must be 1 to 64 printable characters"),
    ("len(data)", '{"line\\nbreak": 1.0}', "metric names must be 1 to 64 printable characters"),
    ("len(data)", '{str(i): 1.0 for i in range(65)}', "65 metrics: the server takes at most 64"),
    ("-1", "{}", "num_samples must be an integer in [0, 1000000000]"),
    ("2.5", "{}", "num_samples must be an integer in [0, 1000000000]"),
])
def test_a_report_the_server_would_refuse_is_one_line_and_nothing_is_kept(
        make_server, tmp_path, monkeypatch, num_samples, metrics, problem):
    server, device = reporting_device(make_server, tmp_path, monkeypatch, num_samples, metrics)
    for _ in range(2):  # each step says so again; nothing reached the server
        with pytest.raises(ValueError) as refused:
            device.step()
        assert str(refused.value) == f"round 0: the method's fit reported {problem}; " \
                                     "nothing is kept or uploaded"
        assert not (device.state_dir / "pending.safetensors").exists()
    assert server.status()["current_round"]["received"] == []
    device.close()


def test_the_most_metrics_with_the_longest_names_outside_ascii_are_taken(
        make_server, tmp_path, monkeypatch):
    """64 names of 64 characters, CJK and emoji: escaped as JSON, 10x their length.

    Before: the server refused metrics JSON over 64 x 104 characters (400) before parsing, so
    such a report, within the documented rules, was refused at every re-send.
    """
    names = '{f"{i:02d}" + "精度" * 30 + "😀😀": -1.7976931348623157e308 for i in range(64)}'
    server, device = reporting_device(make_server, tmp_path, monkeypatch, "len(data)", names)
    step = device.step()
    assert step.status == "trained"
    assert len(step.metrics) == 64 and all(len(name) == 64 for name in step.metrics)
    metrics = server.wait_for(lambda s: s["rounds_done"] == 1)["history"][0]["metrics"]
    assert metrics["00" + "精度" * 30 + "😀😀"] == -1.7976931348623157e308
    device.close()


def test_a_report_the_server_takes_is_its_metadata():
    assert round_report(0, 10**9, {"x" * 64: 1.0, "ünïcödé ✓": 2.0}) == {
        "metrics": '{"' + "x" * 64 + '": 1.0, "\\u00fcn\\u00efc\\u00f6d\\u00e9 \\u2713": 2.0}'}
    assert round_report(0, 0, {}) == {"metrics": "{}"}
