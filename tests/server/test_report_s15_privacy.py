"""report.md names the accountant that counted the run's epsilon: sampling, or none under SecAgg.

pfl-sim accounts a secure-aggregation run without amplification by sampling (the server draws
the sample, so it hides nobody from it: sdk/privacy_accounting.dp_rounds), and its epsilon is
that much larger; the report still said "RDP accountant, fixed-size sampling", so a reader
took the larger epsilon for a sampled run's, and a sampled run's for what SecAgg would give.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pflkit.server.report import write_report

ROWS = [{"round": k, "train_loss": 1.0, "dp_epsilon": 10.7 + k, "dp_delta": 1e-5,
         "dp_noise_multiplier": 1.0, "dp_clip_norm": 1.0} for k in range(2)]
AGGREGATION = '[aggregation]\ndp_clip_norm = 1.0\ndp_noise_multiplier = 1.0\nsecagg = {}\n'


def dp_run(folder: Path, secagg: bool) -> Path:
    """A DP run directory of 2 rounds as pfl-sim writes it, with or without SecAgg."""
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    (folder / "config.toml").write_text('[algorithm]\nname = "fedavg"\n\n'
                                        + AGGREGATION.format(str(secagg).lower()))
    return folder


@pytest.mark.parametrize(("secagg", "said", "not_said"), [
    (True, "accountant: RDP (dp-accounting), no amplification by sampling (secure aggregation",
     "fixed-size"),
    (False, "accountant: RDP (dp-accounting), fixed-size sampling without replacement",
     "secure aggregation"),
])
def test_the_privacy_section_names_how_epsilon_was_accounted(tmp_path, secagg, said, not_said):
    privacy = write_report(dp_run(tmp_path, secagg)).read_text().split("## Privacy")[1]
    assert "epsilon = 11.700 at delta = 1e-05 after 2 rounds" in privacy
    assert said in privacy and not_said not in privacy.split("## ")[0], privacy
