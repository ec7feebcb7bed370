"""LG-FedAvg (Liang et al. 2020): personal (local) representation, shared global head.

The mirror image of FedPer: ``body.*`` stays on the device, ``head.*`` is averaged by the
server. Each round trains the whole model jointly for E epochs and sends the head only.

Choice: the paper optionally starts from a FedAvg-pretrained model; here every client's local
body starts as a copy of the round-0 global body (no pretraining phase), as in the SuPerFed
comparison, so the method is measured on its own.
"""

from __future__ import annotations

from pflkit.sdk.algorithms.base import register
from pflkit.sdk.algorithms.fedper import PartialSharing


@register
class LGFedAvg(PartialSharing):
    """Personal body (``body.*``), shared head."""

    name = "lg_fedavg"
    personal_prefixes = ("body.",)
