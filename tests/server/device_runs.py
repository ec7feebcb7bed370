"""One small pfl-sim config, run on the CPU and on a (real or fake) CUDA device by the GPU tests."""

from __future__ import annotations

from pflkit.sdk.run_config import SimConfig

TOML = """seed = 4
rounds = 2
eval_interval = {eval_interval}
checkpoint_interval = 1
[data]
dataset = "digits"
kind = "dirichlet"
num_clients = 4
alpha = 0.5
min_size = 20
test_fraction = 0.2
[model]
name = "{model}"
[algorithm]
name = "{algorithm}"
[algorithm.params]
{params}
[training]
clients_per_round = 2
epochs = 1
batch_size = 16
lr = 0.05
[execution]
executor = "{executor}"
device = "{device}"
"""



def device_config(algorithm: str, params: str, device: str, executor: str = "sequential",
                  eval_interval: int = 2, model: str = "twonn") -> SimConfig:
    """Digits, Dirichlet over 4 clients, ``model``, 2 rounds of 2 clients on ``device``."""
    return SimConfig.from_toml(TOML.format(algorithm=algorithm, params=params, device=device,
                                           executor=executor, eval_interval=eval_interval,
                                           model=model))
