"""``pfl-server`` settings: one pydantic-settings object read from flags, environment and a file.

Precedence: command-line flags > ``PFL_SERVER_*`` environment variables > the TOML file named
by ``--config`` / ``PFL_SERVER_CONFIG_FILE`` > defaults. The admin token has no default on
purpose: a server never starts with a placeholder secret.
"""

from __future__ import annotations

import json
import math
import os
import re
import typing
from collections.abc import Collection
from pathlib import Path
from typing import Annotated

from pydantic import SecretStr, ValidationError, ValidationInfo, field_validator, model_validator
from pydantic.functional_validators import AfterValidator
from pydantic_settings import (
    BaseSettings,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from pflkit.sdk import aggregation_config as agg
from pflkit.sdk.config_toml import apply_overrides, dump_toml, read_toml
from pflkit.sdk.config_types import MAX_CLIENTS, ConfigError, closest, describe, in_range, shown
from pflkit.sdk.protocol import MAX_NUM_SAMPLES, sendable
from pflkit.sdk.registry import ImportPolicy

ENV_PREFIX = "PFL_SERVER_"
PROCESS_VARIABLES = {"CONFIG_FILE", "WAKE_SOCKET"}  # PFL_SERVER_* that are not settings
# settings whose pfl-server flag is not --<name>
FLAGS = {"admin_token": "--admin-token-file", "run_overrides": "--set"}
# Every number has a range (docs/server.md): none infinite, NaN, or so large that the server
# waits for ever or allocates without bound. As text (a flag, a variable) it is spelled as in
# JSON, as the HTTP API reads integers (api/params.py): int() took 1_0 for 10, +5, " 7 ", 010.
WEEK = 7 * 24 * 3600.0
MIN_ADMIN_TOKEN = 16  # characters

Clients = Annotated[int, in_range(1, MAX_CLIENTS)]
ALLOW_IMPORTS = f"the server's allow_imports (--allow-imports, {ENV_PREFIX}ALLOW_IMPORTS)"
JSON_NUMBERS = {int: re.compile(r"0|-?[1-9][0-9]*"),  # nan and inf: read, for in_range's line
                float: re.compile(r"-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?|(?i:nan|-?inf)")}
MAX_NUMBER_TEXT = 32  # characters: far more than any setting's range needs


class ServerSettings(BaseSettings):
    """Everything a ``pfl-server`` process needs to know."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="forbid")

    data_dir: Path = Path("pfl-server-data")  # SQLite file, blobs and scratch space live here
    database_url: str | None = None  # None: SQLite (WAL) at DATA_DIR/server.db; or postgresql://
    blob_dir: Path | None = None  # None: DATA_DIR/blobs (share it between replicas)
    host: str = "127.0.0.1"
    port: Annotated[int, in_range(0, 65535)] = 8000  # 0: any free port
    workers: Annotated[int, in_range(1, 64)] = 1  # uvicorn worker processes sharing the database
    tls_certfile: Path | None = None
    tls_keyfile: Path | None = None
    # serve the API's description at /docs, /redoc and /openapi.json (off: 404), to anyone
    api_docs: bool = False
    # required: the admin API's Bearer token (checked below: pydantic's min_length showed it)
    admin_token: SecretStr
    run_config: Path | None = None  # pfl-sim TOML; started as the first run if none exists
    # KEY=VALUE edits of run_config each time it is read (an environment variable: JSON list)
    run_overrides: Annotated[tuple[str, ...], NoDecode] = ()
    # packages (or package.module:attr) whose import paths a run config may name: code the
    # server imports and calls (built-in names and entry points need nothing); comma-separated
    allow_imports: Annotated[tuple[str, ...], NoDecode] = ()
    dataset_dir: Path | None = None  # a run config's [data] root lies in it (None: no root)
    clients_per_round: Clients | None = None  # overrides the TOML's training section
    min_clients: Clients | None = None  # uploads that close a round early (None: all)
    min_enrolled: Clients | None = None  # enrolled clients before round 0 opens
    round_deadline: Annotated[float, in_range(0.0, WEEK, open_low=True)] = 600.0  # s, then closed
    max_upload_bytes: Annotated[int, in_range(1024, 2**32)] = 64 * 2**20  # larger bodies: 413
    # failed authentications per client address and window before it gets 429 (per worker)
    auth_failure_limit: Annotated[int, in_range(1, 10**6)] = 30
    auth_failure_window: Annotated[float, in_range(0.0, 86400.0, open_low=True)] = 60.0  # s
    max_header_bytes: Annotated[int, in_range(1024, 2**20)] = 16 * 1024  # longer heads: 431
    # seconds from a connection's opening (or a request's first byte) to its whole head
    header_timeout: Annotated[float, in_range(0.0, 3600.0, open_low=True)] = 30.0
    # seconds a request body may go without a byte arriving (then 408, connection closed)
    body_timeout: Annotated[float, in_range(0.0, 3600.0, open_low=True)] = 60.0
    # larger JSON bodies (runs, tokens, enrollment, queries) get 413, read after credentials
    max_json_bytes: Annotated[int, in_range(1024, 64 * 2**20)] = 2**20
    # seconds an idle connection stays open: above clients' poll interval, proxies' timeouts
    keep_alive_timeout: Annotated[float, in_range(0.0, 3600.0, open_low=True)] = 75.0
    # an update's weight in the mean is the sample count its client reports: larger get 422
    max_num_samples: Annotated[int, in_range(1, MAX_NUM_SAMPLES)] = 100_000
    # the floor of every run's [aggregation] (AggregationConfig.at_least: the stricter wins)
    aggregation: agg.Rule = "mean"
    trim_fraction: agg.TrimFraction = 0.1
    clip_norm: agg.ClipNorm | None = None
    # DP-FedAvg required of every run when dp_clip_norm is set (docs/privacy.md), these at least
    dp_clip_norm: agg.ClipNorm | None = None
    dp_noise_multiplier: agg.NoiseMultiplier | None = None
    dp_target_epsilon: agg.Epsilon | None = None
    dp_delta: agg.Delta = 1e-5
    dp_max_epsilon: agg.Epsilon | None = None
    tick_seconds: Annotated[float, in_range(0.0, 60.0, open_low=True)] = 0.5  # keeper period

    @field_validator("*", mode="before")
    @classmethod
    def _text_and_numbers(cls, value: object, info: ValidationInfo) -> object:
        # "": PFL_SERVER_HOST= listened on every address, a path "" was the cwd; NUL: a traceback
        if value == "" or "\0" in str(value):
            raise ValueError("must not contain a NUL character" if value else
                             "must not be empty (unset it for the default)")
        number = NUMBERS.get(info.field_name or "")
        return value if number is None or value is None else read_number(value, *number)

    @field_validator("admin_token")
    @classmethod
    def _sendable(cls, value: SecretStr) -> SecretStr:
        """A token no client can send in an HTTP header left the admin API unusable."""
        token = value.get_secret_value()
        if len(token) < MIN_ADMIN_TOKEN:
            raise ValueError(f"must be at least {MIN_ADMIN_TOKEN} characters, got {len(token)} "
                             f"(not shown here)")
        if not sendable(token):
            raise ValueError("must be printable ASCII without spaces: it travels in an HTTP "
                             "header (not shown here)")
        return value

    @field_validator("run_overrides", mode="before")
    @classmethod
    def _json_list(cls, value: object) -> object:
        """The environment's JSON list (a VALUE may hold commas: ``[1, 2]``)."""
        if not isinstance(value, str):
            return value
        try:
            return json.loads(value)
        except ValueError:
            raise ValueError('must be a JSON list of KEY=VALUE strings (["rounds=5"])') from None

    @field_validator("run_overrides")
    @classmethod
    def _key_values(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        """Each KEY=VALUE well-formed, however often the server reads run_config."""
        try:
            apply_overrides({}, value)
        except ConfigError as err:
            raise ValueError(str(err)) from None
        return value

    @field_validator("allow_imports", mode="before")
    @classmethod
    def _comma_separated(cls, value: object) -> object:
        return tuple(value.split(",")) if isinstance(value, str) else value

    @field_validator("allow_imports")
    @classmethod
    def _package_names(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(sorted(cls._policy(value).allowed))

    @staticmethod
    def _policy(names: tuple[str, ...]) -> ImportPolicy:
        return ImportPolicy.allowing(names, ALLOW_IMPORTS)

    @property
    def imports(self) -> ImportPolicy:
        """The import paths run configs may name on this server."""
        return self._policy(self.allow_imports)

    @property
    def aggregation_floor(self) -> agg.AggregationConfig:
        """The operator's aggregation settings, the least every run gets."""
        dp = (f for f in type(self).model_fields if f.startswith("dp_"))
        keys = ("trim_fraction", "clip_norm", *dp)
        return agg.AggregationConfig(self.aggregation, **{k: getattr(self, k) for k in keys})

    @model_validator(mode="after")
    def _settings_that_go_together(self) -> ServerSettings:
        if self.run_overrides and self.run_config is None:
            raise ValueError("run_overrides (--set) change the run config: set run_config "
                             "(--run-config) too")
        _ = self.aggregation_floor  # the DP keys' combination, refused like a run config's
        if (self.tls_certfile is None) != (self.tls_keyfile is None):
            raise ValueError("tls_certfile and tls_keyfile must be given together")
        return self

    @classmethod
    def settings_customise_sources(
        cls, settings_cls: type[BaseSettings], init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource, dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Order the sources: flags (init), then environment, then the TOML config file."""
        return init_settings, env_settings, TomlConfigSettingsSource(settings_cls)

    @classmethod
    def load(cls, config_file: Path | None = None, **flags: object) -> ServerSettings:
        """Read settings; ``config_file`` (or ``$PFL_SERVER_CONFIG_FILE``) is a TOML file."""
        check_environment()
        path = config_file or os.environ.get(f"{ENV_PREFIX}CONFIG_FILE")
        if path is not None:
            check_toml_file(Path(path))

        class _WithFile(cls):  # type: ignore[valid-type,misc]
            model_config = SettingsConfigDict(**{**cls.model_config, "toml_file": path})

        return _WithFile(**{k: v for k, v in flags.items() if v is not None})

    def run_config_toml(self) -> str:
        """``run_config`` as it reads now, with ``run_overrides``: each run made of it.

        Read as pfl-sim reads a config (at most MAX_CONFIG_BYTES of UTF-8 TOML), each time:
        an edit on disk counts from the next run, and ``--set`` applies to every run.
        """
        if self.run_config is None:
            raise ConfigError("no config_toml given and the server has no run_config file")
        return dump_toml(apply_overrides(read_toml(self.run_config), self.run_overrides))

    @property
    def db_url(self) -> str:
        """The SQLAlchemy URL actually used."""
        return self.database_url or f"sqlite:///{(self.data_dir / 'server.db').resolve()}"

    @property
    def blobs(self) -> Path:
        """Folder of the content-addressed blob store."""
        return self.blob_dir or self.data_dir / "blobs"


def read_number(value: object, kind: type, stated_range: str) -> object:
    """``value`` if a ``kind`` setting takes it: text as JSON spells it; not ``true``, 8.0 for 8."""
    if isinstance(value, str):
        if len(value) <= MAX_NUMBER_TEXT and JSON_NUMBERS[kind].fullmatch(value):
            return kind(value)
    elif type(value) is int or type(value) is kind:
        return value
    raise ValueError(f"must be {'an integer' if kind is int else 'a number'} {stated_range} "
                     f"as JSON writes it (no '+', '_', spaces, leading 0), got {shown(value)}")


def _number_settings() -> dict[str, tuple[type, str]]:
    """Each number setting's type and range, as its in_range check words it when given NaN."""
    numbers = {}
    for name, field in ServerSettings.model_fields.items():
        hint = next(iter(typing.get_args(field.annotation)), field.annotation)  # X of X | None
        kind, *checks = typing.get_args(hint) or (hint, *field.metadata)
        for check in (c.func for c in checks if isinstance(c, AfterValidator)):
            try:  # "must be in [1, 64], got nan": one statement of a range, the enforced one
                check(math.nan)
            except ValueError as err:
                numbers[name] = (kind, str(err).removeprefix("must be ").partition(", got")[0])
    return numbers


NUMBERS = _number_settings()  # read_number's settings: int or float, and the range


def check_environment() -> None:
    """Refuse a ``PFL_SERVER_*`` variable that names no setting (pydantic ignores a typo)."""
    for variable in sorted(os.environ):
        name = variable.removeprefix(ENV_PREFIX).lower()
        if variable.startswith(ENV_PREFIX) and name not in ServerSettings.model_fields and \
                variable.removeprefix(ENV_PREFIX) not in PROCESS_VARIABLES:
            guess = closest(name, ServerSettings.model_fields)
            hint = f"; did you mean {ENV_PREFIX}{guess.upper()}?" if guess else ""
            raise ConfigError(f"unknown setting variable {variable}{hint}")


def check_toml_file(path: Path) -> None:
    """Refuse a missing or broken config file in one line (pydantic-settings: a traceback)."""
    if not path.exists():
        raise FileNotFoundError(f"server config file {path} does not exist")
    read_toml(path)


def explain(err: ValidationError, flagged: Collection[str] | None = None) -> str:
    """A settings error as one line naming where to set it.

    Its flag when pfl-server has one (``flagged``: those settings, by default the ones
    ``pfl-server serve`` takes), else the config file's key; and its environment variable.
    """
    if flagged is None:
        from pflkit.server.cli import flagged_settings  # the CLI imports this module

        flagged = flagged_settings()
    first = err.errors()[0]
    name = str(first["loc"][0]) if first["loc"] else ""
    if first["type"] == "extra_forbidden":
        guess = closest(name, ServerSettings.model_fields)
        hint = f"; did you mean '{guess}'?" if guess else ""
        return f"unknown setting '{name}' in the --config file{hint}"

    def where(loc: object) -> str:
        variable = f"{ENV_PREFIX}{name.upper()}"
        if name not in flagged:
            return f"{name} (the --config file's, or {variable})"
        return f"{FLAGS.get(name, '--' + name.replace('_', '-'))} (or {variable})"

    return describe(err, where)
