"""A new client's zero-shot head from what a user or a query body sends: odd, hostile inputs.

The head query (server and ``pfl-fedrod-head``) takes a class distribution from outside; its
refusals stay one short line, and it never hands out a head that is not finite.
"""

import pytest
import torch
import torch.nn.functional as F
from fedrod_harness import algo
from typer.testing import CliRunner

from pflkit.sdk.algorithms import Choice, ClientState
from pflkit.sdk.algorithms.fedrod import zero_shot_head
from pflkit.sdk.algorithms.fedrod_hypernet import head_query
from pflkit.sdk.fedrod_head_cli import DEPRECATED, app
from pflkit.sdk.tensorio import save_state

ONES = "1,1,1,1,1,1,1,1,1,1"


@pytest.fixture(scope="module")
def hyper_global():
    return algo("fedrod_hyper").aggregation.init_global(0)


def error_line(output: str) -> str:
    """The CLI's error, after its deprecation note: exactly one line."""
    lines = [line for line in output.strip().splitlines() if line != DEPRECATED]
    assert len(lines) == 1, output
    return lines[0]


def test_a_huge_query_body_gets_a_short_refusal(hyper_global):
    body = {"class_distribution": [-1] * 200_000}  # fits a 1 MiB JSON body
    with pytest.raises(ValueError, match="class_distribution must be") as err:
        head_query(hyper_global, body)
    assert len(str(err.value)) < 400


def test_booleans_are_not_class_counts(hyper_global):
    with pytest.raises(ValueError, match="class_distribution must be"):
        head_query(hyper_global, {"class_distribution": [True] + [False] * 9})


def test_a_diverged_hypernetwork_gives_no_head(hyper_global, tmp_path):
    broken = {**hyper_global,
              "hyper.fc1.weight": torch.full_like(hyper_global["hyper.fc1.weight"], torch.nan)}
    with pytest.raises(ValueError, match="NaN or infinite"):
        head_query(broken, {"class_distribution": [1] * 10})
    save_state(tmp_path / "global.safetensors", broken)
    out = tmp_path / "head.safetensors"
    result = CliRunner().invoke(app, [str(tmp_path / "global.safetensors"), "--class-counts",
                                      ONES, "--out", str(out)])
    assert result.exit_code == 2 and "NaN or infinite" in error_line(result.output)
    assert not out.exists()


@pytest.mark.parametrize(("option", "text"), [("--proportions", "0.5,0.5"),
                                              ("--class-counts", ONES + ",1")])
def test_a_wrong_length_names_the_option(hyper_global, tmp_path, option, text):
    save_state(tmp_path / "global.safetensors", hyper_global)
    result = CliRunner().invoke(app, [str(tmp_path / "global.safetensors"), option, text,
                                      "--out", str(tmp_path / "head.safetensors")])
    line = error_line(result.output)
    assert result.exit_code == 2 and line.startswith(f"error: {option}: ") and \
        "10 entries" in line, line


def test_the_head_is_the_hypernetwork_on_normalized_counts(hyper_global):
    """Paper, sec. 4.3: a_m[c] = N_mc / sum N_m, so counts, their multiples and shares agree."""
    counts = torch.tensor([5, 0, 12, 3, 0, 0, 7, 1, 0, 2], dtype=torch.float64)
    a = (counts / counts.sum()).float()
    flat = F.linear(F.relu(F.linear(a, hyper_global["hyper.fc1.weight"])),
                    hyper_global["hyper.fc2.weight"])
    for given in (counts, counts * 1e30, counts / counts.sum()):
        phi = zero_shot_head(hyper_global, given.tolist())
        assert torch.allclose(torch.cat([phi["bias"], phi["weight"].flatten()]), flat,
                              atol=1e-6)  # layer order: "bias" sorts before "weight"
    assert all(torch.equal(zero_shot_head(hyper_global, counts)[k], v)
               for k, v in zero_shot_head(hyper_global, counts).items())  # deterministic


def test_a_new_client_card_names_only_the_given_distribution(hyper_global):
    """With a given distribution the client state is not used: its counts stay off the card."""
    alg, own = algo("fedrod_hyper"), [9, 1, 0, 0, 0, 0, 0, 0, 0, 0]
    state = ClientState(meta={"class_counts": own})
    given = alg.inference.inference_model(hyper_global, state,
                                          Choice({"class_distribution": [0, 0, 3] + [0] * 7}))
    assert given.mixture.details["class_counts"] is None
    assert given.mixture.choice == {"class_distribution": [0.0, 0.0, 3.0] + [0.0] * 7}
    assert alg.inference.inference_model(hyper_global, state).mixture.details[
        "class_counts"] == own
