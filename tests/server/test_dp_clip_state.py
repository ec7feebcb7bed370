"""DP's clip norm on the server: devices that clip (the norm checked), adaptive clipping's state.

Each service test runs on a SQLite file and on a real PostgreSQL database (``database_url``).
"""

from __future__ import annotations

import pytest
import torch
from service_harness import current, global_of, service_for
from sqlalchemy import inspect, text

from pflkit.sdk.aggregation_rules import clip_update
from pflkit.sdk.tensorio import state_to_bytes
from pflkit.server.clip_check import clip_problem
from pflkit.server.db import make_engine
from pflkit.server.errors import Invalid
from pflkit.server.orm import RunClipNorm
from pflkit.server.service import build_service
from pflkit.server.update_check import read_layout

DEVICE_CLIPS = "[aggregation]\ndp_clip_norm = 1.0\ndp_noise_multiplier = 1.0\n" \
    "dp_clip_on_device = true\n"
ADAPTIVE = "[aggregation]\ndp_clip_norm = 1.0\ndp_noise_multiplier = 1.0\n" \
    "dp_adaptive_quantile = 0.5\ndp_clipped_count_stddev = 1.0\n"


def test_an_update_over_the_clip_norm_is_a_422_and_the_round_is_unchanged(tmp_path,
                                                                             database_url):
    """Issue 24 item 6: an update over the clip norm when the device clips."""
    service, _ = service_for(tmp_path, database_url, per_round=3, run_extra=DEVICE_CLIPS)
    status, rnd = current(service)
    cid = rnd["sampled"][0]
    assert service.tasks.task(cid)["clip_norm"] == 1.0
    start = global_of(service, status["global_hash"])
    big = {k: v + 5 for k, v in start.items()}
    with pytest.raises(Invalid, match=r"L2 norm \d+\.?\d*, over the round's clip norm 1 "):
        service.uploads.accept(cid, status["id"], 0, 10, state_to_bytes(big))
    assert current(service)[1]["received"] == []
    service.uploads.accept(cid, status["id"], 0, 10, state_to_bytes(clip_update(start, big, 1.0)))
    assert current(service)[1]["received"] == [cid]


def test_without_device_clipping_a_task_carries_no_clip_norm(tmp_path):
    service, _ = service_for(tmp_path, None, per_round=3, run_extra=ADAPTIVE)
    assert "clip_norm" not in service.tasks.task(current(service)[1]["sampled"][0])


@pytest.mark.parametrize("dtype, clip", [(torch.float32, 0.3), (torch.float16, 30.0),
                                         (torch.bfloat16, 200.0)])
def test_the_norm_check_passes_float_rounding_and_nothing_over(dtype, clip):
    """Tolerance: C * (1 + 1e-6) + ||eps * u||, the cast back to the tensor's dtype (here
    ||u|| is about 250: 3e-5 for float32, 0.25 for float16, 2 for bfloat16)."""
    gen = torch.Generator().manual_seed(0)
    glob = {"a": torch.randn(300, 200, generator=gen).to(dtype), "b": torch.randn(7).to(dtype)}
    glob_bytes = state_to_bytes(glob)
    for trial in range(5):
        step = {k: v + torch.randn(v.shape, generator=gen).to(dtype) for k, v in glob.items()}
        clipped = state_to_bytes(clip_update(glob, step, clip))
        assert clip_problem(clipped, read_layout(clipped), glob_bytes, clip) is None, trial
        over = state_to_bytes(clip_update(glob, step, clip * 1.05))
        assert clip_problem(over, read_layout(over), glob_bytes, clip) is not None, trial


def test_adaptive_clipping_stores_the_next_clip_norm_with_each_close(tmp_path, database_url):
    service, _ = service_for(tmp_path, database_url, per_round=3, run_extra=ADAPTIVE)
    norms = []
    for index in range(2):
        status, rnd = current(service)
        start = global_of(service, status["global_hash"])
        for cid, shift in zip(rnd["sampled"], [0.001, 0.002, 5.0], strict=True):
            service.uploads.accept(cid, status["id"], index, 10,
                                   state_to_bytes({k: v + shift for k, v in start.items()}))
        service.rounds.tick()
        with service.store.transaction() as s:
            norms.append(s.get(RunClipNorm, status["id"]).clip_norm)
    history = service.runs.status(None)["history"]
    assert [h["metrics"]["dp_clip_norm"] for h in history] == [1.0, norms[0]]
    assert norms[0] != 1.0 and norms[1] != norms[0]


def test_a_database_from_before_the_clip_norm_table_opens_and_gains_it(tmp_path):
    service, _ = service_for(tmp_path, None, per_round=3)
    engine = make_engine(service.store.settings.db_url)
    with engine.begin() as connection:
        connection.execute(text("DROP TABLE run_clip_norms"))
    assert "run_clip_norms" not in inspect(engine).get_table_names()
    reopened = build_service(service.store.settings)
    assert reopened.runs.status(None)["rounds_done"] == 0
    assert "run_clip_norms" in inspect(engine).get_table_names()
