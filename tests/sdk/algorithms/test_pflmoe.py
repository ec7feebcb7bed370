import math
from pathlib import Path

import numpy as np
import pytest
import torch

from pflkit.sdk.algorithms import (
    ClientState,
    HyperparameterError,
    LocalTraining,
    ModelFactory,
    RoundContext,
    make_algorithm,
)
from pflkit.sdk.algorithms.pflmoe import GATE, PERSONAL, split_for_gate
from pflkit.sdk.algorithms.pflmoe_modules import (
    GatedExperts,
    GatedProgram,
    gate_value,
    mix_experts,
)
from pflkit.sdk.data.tensors import LabeledTensors
from pflkit.sdk.run_config import SimConfig
from pflkit.sdk.state_store import client_state_from_bytes, client_state_to_bytes

LENET = ModelFactory("lenet5", (1, 32, 32), 10)
TWONN = ModelFactory("twonn", (1, 8, 8), 10)
LOCAL = LocalTraining(epochs=1, batch_size=16, momentum=0.5, weight_decay=0.0)


def data(n=48, shape=(1, 32, 32), seed=0):
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, 10, (n,), generator=g)
    x = torch.randn(n, *shape, generator=g) + y.view(-1, 1, 1, 1) * 0.3  # learnable a little
    return LabeledTensors(x, y)


def ctx(client=0, round_index=3):
    return RoundContext(round_index, 3, 0.05, seed=0, client_id=client)


def algorithm(variant="mfe", factory=LENET, **params):
    gate = {} if variant == "fb" else {"gate_lr": 0.05}
    params = {"variant": variant, "epochs": 3, "batch_size": 16, "head_lr": 0.05, **gate,
              **params}
    return make_algorithm("pflmoe", factory, LOCAL, params)


def trained_global(algo, n=48, shape=(1, 32, 32)):
    """A global state after one FedAvg round, so that both experts are not just the init."""
    glob = algo.aggregation.init_global(seed=0)
    return algo.training.fit(glob, ClientState(), data(n, shape, seed=1), ctx(round_index=0)).update


def personalized(variant="mfe", factory=LENET, shape=(1, 32, 32), n=48, **params):
    algo = algorithm(variant, factory, **params)
    glob = trained_global(algo, shape=shape)
    local = data(n, shape)
    start = algo.training.init_client(0, 0, local)
    state = algo.personalization.personalize(glob, start, local, ctx())
    return algo, glob, state, local


@pytest.mark.parametrize(("params", "name"), [
    ({"variant": "moe"}, "variant"), ({"gate_fraction": 1.0}, "gate_fraction"),
    ({"gate_optimizer": "rmsprop"}, "gate_optimizer"), ({"epochs": -1}, "epochs"),
    ({"head_lr": 0.0}, "head_lr"), ({"batch_size": 0}, "batch_size"),
])
def test_bad_hyperparameters_name_method_and_parameter(params, name):
    with pytest.raises(HyperparameterError, match=rf"pflmoe.*'{name}'"):
        make_algorithm("pflmoe", LENET, LOCAL, params)


@pytest.mark.parametrize("params", [{"gate_lr": 0.001}, {"gate_optimizer": "sgd"}])
def test_gate_settings_are_refused_for_pfl_fb_which_has_no_gate(params):
    """Given with ``variant = "fb"`` they were accepted and ignored: settings that look used."""
    with pytest.raises(HyperparameterError, match=rf"'{next(iter(params))}' must be unset"):
        make_algorithm("pflmoe", LENET, LOCAL, {"variant": "fb", **params})


@pytest.mark.parametrize("variant", ["fb", "mf", "mfe"])
def test_the_docs_config_takes_each_variant_as_its_first_line_says(variant):
    """docs/configs/pflmoe.toml: ``--param variant=mf (or fb)``; its gate_lr refused fb."""
    path = Path(__file__).parents[3] / "docs" / "configs" / "pflmoe.toml"
    assert "--param variant=mf (or fb)" in path.read_text().splitlines()[2]
    config = SimConfig.load(path, [f'algorithm.params.variant="{variant}"'])
    assert config.algorithm.params["variant"] == variant


def test_mix_experts_is_the_convex_combination_of_logits():
    rng = np.random.default_rng(0)
    g, lg, lp = rng.uniform(size=(5, 1)), rng.normal(size=(5, 3)), rng.normal(size=(5, 3))
    out = mix_experts(*(torch.tensor(v) for v in (g, lg, lp)))
    np.testing.assert_allclose(out.numpy(), g * lg + (1 - g) * lp)


def test_split_is_seeded_disjoint_and_a_quarter_for_the_gate():
    per, gate = split_for_gate(10, 0.25, seed=7)
    assert len(gate) == 2 and len(per) == 8
    assert sorted(torch.cat([per, gate]).tolist()) == list(range(10))
    again = split_for_gate(10, 0.25, seed=7)
    assert torch.equal(per, again[0]) and torch.equal(gate, again[1])


def test_stage_one_is_fedavg_bit_for_bit():
    moe = algorithm()
    fedavg = make_algorithm("fedavg", LENET, LOCAL)
    glob = moe.aggregation.init_global(seed=0)
    assert all(torch.equal(glob[k], v) for k, v in fedavg.aggregation.init_global(seed=0).items())
    a = moe.training.fit(glob, moe.training.init_client(0, 0, data()), data(), ctx(round_index=0))
    b = fedavg.training.fit(glob, ClientState(), data(), ctx(round_index=0))
    assert all(torch.equal(a.update[k], b.update[k]) for k in glob)
    assert "split_seed" in a.client_state.meta  # the seed survives stage 1


@pytest.mark.parametrize("variant", ["fb", "mf", "mfe"])
def test_stage_two_leaves_extractor_and_global_classifier_bit_identical(variant):
    algo = algorithm(variant)
    glob = trained_global(algo)
    before = {k: v.clone() for k, v in glob.items()}
    local = data()
    start = algo.training.init_client(0, 0, local)
    state = algo.personalization.personalize(glob, start, local, ctx())
    assert all(torch.equal(glob[k], before[k]) for k in before)
    model = algo.inference.personalized_model(glob, state)
    body = {f"body.{k}": v for k, v in model.body.state_dict().items()}
    assert all(torch.equal(v, before[k]) for k, v in body.items())
    if variant != "fb":
        heads = {f"head.{k}": v for k, v in model.global_head.state_dict().items()}
        assert all(torch.equal(v, before[k]) for k, v in heads.items())
        personal = {k.removeprefix(PERSONAL): v for k, v in state.tensors.items()
                    if k.startswith(PERSONAL)}
        assert any(not torch.equal(personal[k], before[k]) for k in heads)  # C_i did learn
    assert (GATE + "weight" in state.tensors) == (variant != "fb")


def test_the_gate_step_changes_only_the_gate_and_the_head_step_only_the_head():
    from pflkit.sdk.algorithms.personal import EagerSession

    algo = algorithm("mfe")
    glob = trained_global(algo)
    local = data()
    start = algo.training.init_client(0, 0, local)
    part = algo.personalization.personal_training(glob, start, local, ctx())
    assert isinstance(part.program, GatedProgram)
    session = EagerSession(part)
    prepared = session.prepare(local.x[:20])
    frozen = [t.clone() for t in prepared]
    inputs = (*prepared, local.y[:20])
    # The head first: while C_i equals C the gate's gradient is exactly zero.
    for stepped, other in (("personal_head", GATE), ("gate", PERSONAL)):
        before = session.weights()
        session.step(stepped, inputs)
        after = session.weights()
        assert all(torch.equal(after[k], before[k]) for k in after if k.startswith(other))
        assert any(not torch.equal(after[k], before[k]) for k in after
                   if not k.startswith(other))
    assert all(torch.equal(a, b) for a, b in zip(prepared, frozen, strict=True))


def test_a_pass_cut_short_by_max_steps_reports_the_mean_loss_of_its_steps():
    """The export's parity entry (last_loss_eager / _program) reads these: never empty."""
    from pflkit.sdk.algorithms.personal import EagerSession, run_recipe

    algo = algorithm("mfe", TWONN)
    local = data(200, (1, 8, 8))
    part = algo.personalization.personal_training(trained_global(algo, shape=(1, 8, 8)),
                                                  algo.training.init_client(0, 0, local), local,
                                                  ctx())
    session = EagerSession(part)
    seen, step = [], session.step

    def recording(name, inputs):
        seen.append(step(name, inputs))
        return seen[-1]

    session.step = recording
    result = run_recipe(part.recipe, session, local, part.rows, part.generator, max_steps=4)
    assert result.steps == 4 and len(seen) == 4  # the first pass has 10 batches
    assert result.losses == {"personal_head": pytest.approx(float(sum(seen)) / 4)}


def test_fb_mf_and_mfe_share_the_same_personal_classifier():
    states = {v: personalized(v)[2] for v in ("fb", "mf", "mfe")}
    keys = [k for k in states["fb"].tensors if k.startswith(PERSONAL)]
    for k in keys:
        assert torch.equal(states["fb"].tensors[k], states["mf"].tensors[k])
        assert torch.equal(states["fb"].tensors[k], states["mfe"].tensors[k])
    assert states["mf"].tensors[GATE + "weight"].shape == (1, 1024)
    assert states["mfe"].tensors[GATE + "weight"].shape == (1, 400)


@pytest.mark.parametrize(("variant", "size"), [("mf", 1024), ("mfe", 400)])
def test_gates_see_inputs_of_the_documented_size_and_g_stays_in_0_1(variant, size):
    algo, glob, state, local = personalized(variant, epochs=5)
    model = algo.inference.personalized_model(glob, state)
    assert isinstance(model, GatedExperts) and model.gate.in_features == size
    seen = []
    model.gate.register_forward_hook(lambda _m, inputs, _o: seen.append(inputs[0].shape))
    x = local.x[:7]
    logits = model(x)
    assert seen == [torch.Size([7, size])] and logits.shape == (7, 10)
    with torch.no_grad():
        g = gate_value(model.gate, model.gate_input(x, model.body(x)))
    assert bool(((g > 0) & (g < 1)).all())
    assert not torch.allclose(g, torch.full_like(g, 0.5))  # the gate learned something


def test_gate_forced_to_one_gives_the_global_model_and_head_logits_match_forward():
    algo, glob, state, local = personalized("mfe")
    model = algo.inference.personalized_model(glob, state)
    x = local.x[:9]
    with torch.no_grad():
        assert torch.allclose(model(x), model.head_logits(x, model.body(x)))
        model.gate.weight.zero_()
        model.gate.bias.fill_(math.inf)  # g = sigmoid(inf) = 1
        global_logits = algo.inference.global_model(glob)(x)
        assert torch.equal(model(x), global_logits)


def test_before_stage_two_the_personalized_model_is_the_global_model():
    algo = algorithm()
    glob = trained_global(algo)
    x = data().x[:5]
    model = algo.inference.personalized_model(glob, algo.training.init_client(0, 0, data()))
    with torch.no_grad():
        assert torch.equal(model(x), algo.inference.global_model(glob)(x))


@pytest.mark.parametrize("n", [0, 1, 3, 5])
def test_tiny_clients_follow_the_documented_rule(n):
    algo, glob, state, local = personalized("mfe", n=n, batch_size=64)
    assert state.meta["n_gate"] == math.floor(0.25 * n)
    assert state.meta["n_per"] + state.meta["n_gate"] == n
    model = algo.inference.personalized_model(glob, state)
    x = data(4).x
    with torch.no_grad():
        assert torch.isfinite(model(x)).all()
        g = gate_value(model.gate, model.gate_input(x, model.body(x)))
    if state.meta["n_gate"] == 0:  # no gate data: the untrained gate mixes 50/50
        assert torch.equal(g, torch.full_like(g, 0.5))
    if n == 0:  # no data: C_i is still the global classifier
        heads = {k.removeprefix(PERSONAL): v for k, v in state.tensors.items()
                 if k.startswith(PERSONAL)}
        assert all(torch.equal(v, glob[k]) for k, v in heads.items())


def test_state_round_trips_through_safetensors_and_stage_two_is_deterministic():
    algo, glob, state, local = personalized("mf")
    start = algo.training.init_client(0, 0, local)
    again = algo.personalization.personalize(glob, start, local, ctx())
    assert state.meta == again.meta
    assert all(torch.equal(v, again.tensors[k]) for k, v in state.tensors.items())
    restored = client_state_from_bytes(client_state_to_bytes(state))
    x = local.x[:6]
    with torch.no_grad():
        assert torch.equal(algo.inference.personalized_model(glob, state)(x),
                           algo.inference.personalized_model(glob, restored)(x))


def test_a_state_of_another_variant_is_refused():
    _, glob, state, _ = personalized("mf")
    with pytest.raises(ValueError, match="variant 'mf'"):
        algorithm("mfe").inference.personalized_model(glob, state)


def test_works_for_other_registry_models_and_adam_gate():
    algo, glob, state, local = personalized("mfe", TWONN, (1, 8, 8), gate_optimizer="adam")
    assert state.tensors[GATE + "weight"].shape == (1, 200)
    assert algo.inference.personalized_model(glob, state)(local.x[:3]).shape == (3, 10)
    algo, glob, state, local = personalized("mf", TWONN, (1, 8, 8))
    assert state.tensors[GATE + "weight"].shape == (1, 64)


def test_simulation_runs_stage_two_for_every_client(tmp_path):
    from pflkit.sdk.run_config import (
        AlgorithmConfig,
        DataConfig,
        ModelConfig,
        SimConfig,
        TrainingConfig,
    )
    from pflkit.server.simulator import Simulation

    config = SimConfig(
        seed=0, rounds=2, eval_interval=2, checkpoint_interval=2,
        data=DataConfig(dataset="synthetic", resize=8, kind="dirichlet", num_clients=4, alpha=0.5,
                        min_size=5),
        model=ModelConfig("twonn"),
        algorithm=AlgorithmConfig("pflmoe", {"variant": "mfe", "epochs": 2}),
        training=TrainingConfig(clients_per_round=2, epochs=1, batch_size=32, lr=0.05,
                                lr_decay=1.0, momentum=0.5, weight_decay=0.0),
    )
    final = Simulation(config, tmp_path / "run", progress=False).run().final
    summary = final["clients"]["summary"]
    assert summary["clients"] == 4
    assert 0 <= summary["class_weighted_mean"] <= 1 and 0 <= summary["global_plain_mean"] <= 1
    assert len(list((tmp_path / "run" / "personalized").glob("*.safetensors"))) == 4
