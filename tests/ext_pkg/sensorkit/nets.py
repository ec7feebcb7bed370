"""A non-image model: an MLP over feature vectors, split into body and head."""

from __future__ import annotations

from torch import nn

from pflkit.sdk.models import SplitModel


class SensorNet(SplitModel):
    """Linear-ReLU-Linear-ReLU body (features -> 16) and a linear head (16 -> classes)."""

    def __init__(self, input_shape: tuple[int, ...], num_classes: int) -> None:
        (features,) = input_shape
        body = nn.Sequential(nn.Linear(features, 32), nn.ReLU(), nn.Linear(32, 16), nn.ReLU())
        super().__init__(body, nn.Linear(16, num_classes), feature_dim=16)


class DropoutSensorNet(SplitModel):
    """SensorNet with dropout in its body: its training draws random masks."""

    def __init__(self, input_shape: tuple[int, ...], num_classes: int) -> None:
        (features,) = input_shape
        body = nn.Sequential(nn.Linear(features, 32), nn.ReLU(), nn.Dropout(0.5),
                             nn.Linear(32, 16), nn.ReLU())
        super().__init__(body, nn.Linear(16, num_classes), feature_dim=16)
