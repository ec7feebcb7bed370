"""Request and response bodies; names say the direction (``...In`` read, ``...Public`` sent)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from pflkit.sdk.config_toml import MAX_CONFIG_BYTES, check_config_size
from pflkit.sdk.protocol import MAX_ID


class HealthPublic(BaseModel):
    """Liveness and database reachability (``error`` / ``unavailable`` come with a 503)."""

    status: Literal["ok", "error"]
    database: Literal["ok", "unavailable"]


class JsonIn(BaseModel):
    """A JSON request body: strict (``"8"`` and ``true`` are not integers), no unknown fields."""

    model_config = ConfigDict(strict=True, extra="forbid")


class RunCreateIn(JsonIn):
    """A new run: a pfl-sim TOML config (None: the server's ``run_config`` file)."""

    # a config file's limit, in UTF-8 bytes as pfl-sim reads one (max_length: a quick bound)
    config_toml: Annotated[str, Field(max_length=MAX_CONFIG_BYTES),
                           AfterValidator(check_config_size)] | None = None


class PruneIn(JsonIn):
    """What ``POST /v1/runs/prune`` deletes (server/retention.py)."""

    keep_globals: Annotated[int, Field(ge=1, le=MAX_ID)] | None = None  # per run; None: all
    dry_run: bool = False  # count only


class PrunePublic(BaseModel):
    """What a prune deleted (``dry_run``: would delete); see server/retention.py."""

    dry_run: bool
    files: int
    bytes: int
    updates: int
    global_states: int
    unreferenced: int
    recent: int  # would go, but written or stored again within the last hour: kept


class RoundProgressPublic(BaseModel):
    """The round in progress."""

    index: int
    status: str
    sampled: list[int]
    received: list[int]
    deadline: float  # Unix seconds


class RoundHistoryPublic(BaseModel):
    """A closed round."""

    index: int
    closed_at: float | None
    global_hash: str | None
    metrics: dict[str, Any]


class PrivacyPublic(BaseModel):
    """DP-FedAvg's guarantee after the last closed round (server/privacy_status.py)."""

    epsilon: float  # at delta, spent by the closed rounds
    delta: float
    rounds: int  # closed rounds accounted
    noise_multiplier: float | None  # None: calibrated from target_epsilon when round 0 closes
    target_epsilon: float | None
    clip_norm: float  # dp_clip_norm (the run's, at least the server's)
    max_epsilon: float | None  # the budget (dp_max_epsilon); None: none
    epsilon_left: float | None  # max_epsilon - epsilon
    accountant: str


class RunPublic(BaseModel):
    """Run status and progress."""

    id: int
    status: Literal["active", "paused", "stopped", "finished"]
    algorithm: str
    model: str
    rounds_total: int
    rounds_done: int
    global_hash: str
    enrolled_clients: int
    current_round: RoundProgressPublic | None
    history: list[RoundHistoryPublic]
    privacy: PrivacyPublic | None = None  # None: no DP
    stopped_reason: str | None = None  # why the server stopped it (e.g. its aggregate diverged)


MAX_TOKEN_TTL = 10 * 365 * 86400  # seconds: ten years


class TokenCreateIn(JsonIn):
    """Options of a new enrollment token."""

    client_id: int | None = Field(None, ge=0, le=MAX_ID)  # reserve this client id
    ttl_seconds: float | None = Field(None, gt=0, le=MAX_TOKEN_TTL)


class TokenPublic(BaseModel):
    """A new enrollment token (shown once)."""

    id: int
    token: str
    client_id: int | None


class EnrollIn(JsonIn):
    """A device trading its enrollment token."""

    token: str = Field(min_length=1, max_length=256)


class CredentialsPublic(BaseModel):
    """A client's id and secret (shown once; send the secret as a Bearer token)."""

    client_id: int
    secret: str


class ClientPublic(BaseModel):
    """An enrolled client as the admin sees it."""

    id: int
    enrolled_at: float
    revoked: bool
    last_seen: float | None


class LocalTrainingPublic(BaseModel):
    """Client-side SGD settings."""

    epochs: int
    batch_size: int
    momentum: float
    weight_decay: float


class LearningRateSchedulePublic(BaseModel):
    """The clients' learning rate: round r trains with ``lr * decay ** r``."""

    lr: float
    decay: float


class TaskConfigPublic(BaseModel):
    """Everything a client needs to build the algorithm and train any round of the run."""

    algorithm: str
    params: dict[str, Any]
    model: str
    input_shape: list[int]
    num_classes: int
    seed: int
    total_rounds: int
    lr_schedule: LearningRateSchedulePublic
    local: LocalTrainingPublic


class TaskPreviewPublic(BaseModel):
    """The newest run's task, for a device to check before it enrolls (None: no run to join)."""

    run_id: int | None
    config: TaskConfigPublic | None


class TaskPublic(BaseModel):
    """What to do now. ``train``: download ``global_hash``, fit, upload to ``round``."""

    status: Literal["train", "uploaded", "wait", "paused", "stopped", "finished"]
    retry_after: float  # seconds until the next poll is useful
    run_id: int | None = None
    round: int | None = None  # the run's current round (the one to train for ``train``)
    deadline: float | None = None
    global_hash: str | None = None
    config: TaskConfigPublic | None = None
    clip_norm: float | None = None  # DP on the device: clip the upload's change to it
    max_num_samples: int | None = None  # an update's most num_samples: devices cap at it
    secagg: dict[str, Any] | None = None  # a SecAgg round's public setup (docs/privacy.md)


class ReceiptPublic(BaseModel):
    """An acknowledged (durable) update."""

    run_id: int
    round: int
    sha256: str
    duplicate: bool  # True: this exact upload had already been accepted
