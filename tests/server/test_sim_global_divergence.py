"""A run whose global model diverged ends with its report; the diverged scores are undefined.

At lr 10 with momentum 0.99 on digits (seed 1) the global weights stay finite but grow until
its outputs are Inf by round 6. Before, the final evaluation stopped the run on the first
client (``DivergedModel``): no final.json, no report.md, and ``--resume`` failed the same way.
"""

import json
import logging
import math

from pflkit.sdk.run_config import SimConfig
from pflkit.server.simulator import Simulation

DIVERGING = """
seed = 1
rounds = 6
[data]
dataset = "digits"
num_clients = 4
test_fraction = 0.0
[model]
name = "twonn"
[algorithm]
name = "fedavg"
[training]
fraction = 0.2
lr = 10.0
momentum = 0.99
"""


def test_a_diverged_global_model_is_reported_as_diverged_not_scored(tmp_path, caplog):
    config_file = tmp_path / "run.toml"
    config_file.write_text(DIVERGING)
    run_dir = tmp_path / "run"
    with caplog.at_level(logging.WARNING):
        result = Simulation(SimConfig.load(config_file), run_dir, progress=False).run()
    final = json.loads((run_dir / "final.json").read_text())
    assert final["rounds"] == 6 and (run_dir / "report.md").exists()
    glob = final["global_model"]
    assert glob["diverged"] is True and glob["n"] == 360
    assert all(glob[k] is None for k in ("top1", "top5", "nll", "ece", "mce"))  # no numbers
    clients = final["clients"]
    assert clients["diverged_models"] == [0, 1, 2, 3]
    assert all(row[k] is None for row in clients["per_client"]
               for k in ("class_weighted", "global_plain"))
    assert clients["summary"]["clients"] == 4 and clients["summary"]["class_weighted_mean"] is None
    assert math.isnan(result.final["global_model"]["top1"])
    last = json.loads((run_dir / "metrics.jsonl").read_text().splitlines()[-1])
    assert last["global_diverged"] is True and last["global_top1"] is None  # argmax of Inf: none
    assert "the global model's outputs are NaN or Inf" in caplog.text
    assert "4 of the clients' models give NaN or Inf outputs" in caplog.text
