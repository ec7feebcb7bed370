"""What the DP guarantee covers, for every registered method (issue 24 item 3).

Two devices per method train and upload through ``FederatedClient`` (upload_harness.py). The
bytes each PUT carried, read back with the safetensors reader, must hold exactly the method's
update schema and nothing a device keeps: checked by name, and by value (no two consecutive
values of a kept tensor appear in any upload unless the server sent them first). DP-FedAvg's
rule, run on the same uploads, must clip every update's change to C and noise every uploaded
floating tensor. docs/privacy.md's table is generated from the same runs.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from upload_harness import HEADER, Federation, algorithm, federate, methods, table_row

from pflkit.sdk.aggregation_config import AggregationConfig
from pflkit.sdk.aggregation_rules import refuse_unfit_rules
from pflkit.sdk.dp_fedavg import DpFedAvgAggregator
from pflkit.sdk.privacy_accounting import dp_rounds
from pflkit.sdk.protocol import METRICS_KEY
from pflkit.sdk.tensorio import State, read_metadata, state_from_bytes

DOC = Path(__file__).parents[2] / "docs" / "privacy.md"
# SCAFFOLD's c_i is not personal: the server learns it as the sum of the deltas it receives
SHARED_BY_PROTOCOL = {"scaffold": "control."}
# pFedMe pulls theta and w together until they are equal in float32 where the personal loss
# has no gradient: there theta's values are w's, uploaded (1-4% of theta's pairs here); a
# tensor sent as it is shows ~100%. Every other method: not one pair.
SHARED_VALUES = {"pfedme": 0.1}


@pytest.fixture(scope="module")
def federation(tmp_path_factory):
    """One federation per method, run once per module (about 1 s each)."""
    runs: dict[str, Federation] = {}

    def run(method: str) -> Federation:
        if method not in runs:
            runs[method] = federate(method, tmp_path_factory.mktemp(method))
        return runs[method]

    return run


def pairs(tensor: torch.Tensor, known: torch.Tensor | None = None) -> set[int]:
    """Each two consecutive float32 values as one 64-bit pattern.

    Left out: runs of one value, and pairs touching a ``known`` coordinate (one whose value
    the server sent in a global state: a weight no training step moved is no secret).
    """
    bits = tensor.detach().float().flatten().view(torch.int32).long() & 0xFFFFFFFF
    keep = bits[:-1] != bits[1:]
    if known is not None:
        keep &= ~(known.flatten()[:-1] | known.flatten()[1:])
    return set(((bits[:-1] << 32) | bits[1:])[keep].tolist())


def known_to_server(name: str, value: torch.Tensor, globals_: list[State]) -> torch.Tensor:
    """Which coordinates of a kept tensor equal the same model tensor in a global state."""
    twin = max((k for k in globals_[0] if name.endswith(k)), key=len, default=None)
    known = torch.zeros(value.shape, dtype=torch.bool)
    for g in globals_:
        if twin is not None and g[twin].shape == value.shape:
            known |= g[twin].eq(value)
    return known


def uploads(fed: Federation) -> list[State]:
    return [state_from_bytes(body, "upload") for r in fed.uploads for body in r.values()]


@pytest.mark.parametrize("method", methods())
def test_a_device_uploads_its_shared_tensors_and_nothing_it_keeps(method, federation):
    fed = federation(method)
    kept = [{k: v for k, v in state.items() if not k.startswith(SHARED_BY_PROTOCOL.get(
        method, "\0"))} for state in fed.kept + fed.final]
    for r, bodies in enumerate(fed.uploads):
        schema = algorithm(method).aggregation.update_schema(fed.globals[r])
        assert sorted(bodies) == [1, 2]
        for body in bodies.values():
            update = state_from_bytes(body, "upload")
            assert {k: (tuple(v.shape), v.dtype) for k, v in update.items()} == schema
            assert set(update).isdisjoint(k for state in kept for k in state)
            metadata = read_metadata(body)
            assert set(metadata) == {METRICS_KEY}  # beside the tensors: the metrics only
            assert all(isinstance(v, float) for v in json.loads(metadata[METRICS_KEY]).values())
    sent = set().union(*(pairs(v) for u in uploads(fed) for v in u.values()))
    leaked = set()
    for k, v in (item for state in kept for item in state.items()):
        secret = pairs(v, known_to_server(k, v, fed.globals))
        if len(secret & sent) > SHARED_VALUES.get(method, 0.0) * len(secret):
            leaked.add(k)
    assert sorted(leaked) == [], f"{method} uploads the values of what it keeps: {leaked}"


def noisy_mean(global_state: State, updates: list[State], clip: float) -> State:
    """DP-FedAvg's rule (z = 1, 2 clients a round) on ``updates``, seeded as round 1 of a run."""
    dp = dp_rounds(AggregationConfig(dp_clip_norm=clip, dp_noise_multiplier=1.0), 10, 2, 2)
    assert dp is not None and dp.sample_size == 2
    aggregator = DpFedAvgAggregator(global_state, dp, 7, 1)
    for update in updates:
        aggregator.add(1.0, update)
    return aggregator.result()


def test_dp_is_refused_for_scaffold_whose_control_deltas_have_no_global_copy(federation):
    """SCAFFOLD + DP died at its first close (KeyError): now refused before the run, in one line.

    pfl-sim and pfl-server call this check before any round (tests/server/test_dp_floor.py).
    """
    fed = federation("scaffold")
    g = fed.globals[1]
    aggregation = algorithm("scaffold").aggregation
    dp = AggregationConfig(dp_clip_norm=0.5, dp_noise_multiplier=1.0)
    with pytest.raises(ValueError, match=r"^aggregation.dp_clip_norm: the method uploads \d+ "
                       r"tensor\(s\) with no global counterpart .*'control_delta\."):
        refuse_unfit_rules(dp, aggregation, g)
    refuse_unfit_rules(AggregationConfig(), aggregation, g)  # plain mean: nothing to refuse


@pytest.mark.parametrize("method", [m for m in methods() if m not in ("local", "scaffold")])
def test_dp_clips_and_noises_every_tensor_a_device_uploads(method, federation):
    """Every upload is clipped to C (all of it: one norm), every uploaded coordinate noised.

    The noise depends only on the seed, the round and the keys, so the rule's result for an
    update minus its result for an unchanged upload is the clipped change over m, noise-free.
    """
    fed = federation(method)
    g = fed.globals[1]
    updates = [state_from_bytes(body, "upload") for body in fed.uploads[1].values()]
    floats = [k for k, v in updates[0].items() if v.is_floating_point()]
    assert floats == list(updates[0])  # twonn uploads no integer tensor

    def change(u: State) -> dict[str, torch.Tensor]:
        return {k: u[k].double() - g[k].double() for k in floats}

    def norm(delta: dict[str, torch.Tensor]) -> float:
        return math.sqrt(sum(float((d ** 2).sum()) for d in delta.values()))

    clip = 0.5 * min(norm(change(u)) for u in updates)  # every update is clipped
    noised = noisy_mean(g, [{k: g[k] for k in floats}], clip)
    assert all(torch.equal(noised[k], v) for k, v in g.items() if k not in floats)
    noise = torch.cat([(noised[k].double() - g[k].double()).flatten() * 2 for k in floats])
    assert bool(noise.ne(0).all()), f"{method}: an uploaded coordinate got no noise"
    assert float(noise.std()) == pytest.approx(clip, rel=0.05)  # z * C with z = 1
    for update in updates:
        mine = noisy_mean(g, [update], clip)
        clipped = {k: (mine[k].double() - noised[k].double()) * 2 for k in floats}
        assert norm(clipped) <= clip * (1 + 1e-4)
        expected = {k: d * (clip / norm(change(update))) for k, d in change(update).items()}
        for k in floats:
            torch.testing.assert_close(clipped[k], expected[k], rtol=0, atol=2e-6)


def test_the_privacy_doc_table_is_generated_from_the_registry(federation):
    """docs/privacy.md's table equals the one these runs give (paste the expected one)."""
    table = "\n".join([HEADER, *(table_row(federation(m)) for m in methods())])
    assert table in DOC.read_text(), f"docs/privacy.md needs this table:\n{table}"
