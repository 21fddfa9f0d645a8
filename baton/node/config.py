"""Node configuration: a TOML file, overridden key by key by ``BATON_*`` environment variables,
validated as a whole before anything starts.

::

    node_id = "node-a"
    listen = "127.0.0.1:7400"          # host:port the API binds
    advertise = "10.0.0.5:7400"        # what other nodes use (default: listen)
    store = "redis://10.0.0.9:6379/0"
    token_file = "/etc/baton/token"    # or token = "..." (at least 16 characters)
    data_dir = "/var/lib/baton"
    capacity = 100
    labels = { zone = "a" }

    [timings]                          # Timings; missing values scale from ttl
    ttl = 10

    [spark]
    master = "local[8]"                # the default; or remote = "sc://host:15002"
    conf = { "spark.sql.shuffle.partitions" = "8" }

Environment (each variable is declared on the key it sets, :class:`~baton.settings.Env`, and
wins over the file): ``BATON_NODE_ID``, ``BATON_LISTEN``, ``BATON_ADVERTISE``, ``BATON_STORE``,
``BATON_TOKEN``, ``BATON_TOKEN_FILE``, ``BATON_DATA_DIR``, ``BATON_CAPACITY``, ``BATON_LABELS``
and ``BATON_WORKLOADS`` (``k=v,k=v``), ``BATON_TTL``, ``BATON_RECONCILE_INTERVAL``,
``BATON_SPARK_MASTER``, ``BATON_SPARK_REMOTE``, ``BATON_CHANNELS`` (the table as JSON).

A bad or missing value raises :class:`~baton.errors.ConfigError` with one line naming the key,
the value (never the token's) and what is expected. Numeric keys take numbers only (not
``true``/``false``, NaN or infinity); from the environment, numeric strings.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, ClassVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    field_validator,
    model_validator,
)

from baton.channels.config import ChannelsConfig
from baton.errors import ConfigError, redact_url
from baton.lease.timings import Timings
from baton.settings import Decode, Env, Environment, Settings, TomlFile, env_vars
from baton.store import open_store
from baton.validation import Int, Seconds

_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")
_ADDR = re.compile(r"^(?P<host>[A-Za-z0-9.:\[\]-]+):(?P<port>\d{1,5})$")


class SparkConfig(BaseModel):
    """Where the node's Spark work runs (used by the data pipeline)."""

    model_config = ConfigDict(extra="forbid")
    # Either variable says where Spark runs, replacing the file's choice (a file's master and
    # the environment's remote are not "both": the environment wins).
    master: Annotated[str | None, Env("BATON_SPARK_MASTER", clears=("remote",))] = None
    remote: Annotated[str | None, Env("BATON_SPARK_REMOTE", clears=("master",))] = None
    conf: dict[str, str] = Field(default_factory=dict)

    # The same checks as everywhere else a session is built (baton.spark.session.where).
    @field_validator("master")
    @classmethod
    def _master(cls, value: str | None) -> str | None:
        from baton.spark.session import check_master

        return check_master(value, "") if value else value

    @field_validator("remote")
    @classmethod
    def _remote(cls, value: str | None) -> str | None:
        from baton.spark.session import check_remote

        return check_remote(value, "") if value else value

    @model_validator(mode="after")
    def _one_of(self) -> SparkConfig:
        from baton.spark.session import DEFAULT_MASTER

        if self.master and self.remote:
            raise ValueError("give spark.master or spark.remote, not both")
        if not self.master and not self.remote:
            self.master = DEFAULT_MASTER
        return self


class TimingsConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    ttl: Annotated[Seconds, Env("BATON_TTL")] = 10.0
    renew_interval: Seconds | None = None
    renew_deadline: Seconds | None = None
    request_timeout: Seconds | None = None
    election_timeout_min: Seconds | None = None
    election_timeout_max: Seconds | None = None

    def build(self) -> Timings:
        given = {k: v for k, v in self.model_dump().items() if v is not None and k != "ttl"}
        return Timings.for_ttl(self.ttl, **given)


class PlacementConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    #: The controller reconciles at least this often (and at once on any relevant change).
    reconcile_interval: Annotated[Seconds, Env("BATON_RECONCILE_INTERVAL")] = Field(
        default=0.5, gt=0, le=60
    )


class NodeConfig(Settings):
    """A validated node configuration."""

    noun: ClassVar[str] = "config"
    docs: ClassVar[str] = "docs/node.md"

    node_id: Annotated[str, Env("BATON_NODE_ID")]
    listen: Annotated[str, Env("BATON_LISTEN")] = "127.0.0.1:7400"
    advertise: Annotated[str | None, Env("BATON_ADVERTISE")] = None
    store: Annotated[str, Env("BATON_STORE")]
    token: Annotated[str | None, Env("BATON_TOKEN")] = Field(default=None, repr=False)
    token_file: Annotated[Path | None, Env("BATON_TOKEN_FILE")] = None
    data_dir: Annotated[Path, Env("BATON_DATA_DIR")]
    capacity: Annotated[Int, Env("BATON_CAPACITY")] = Field(default=100, ge=1, le=1_000_000)
    labels: Annotated[dict[str, str], Env("BATON_LABELS", Decode.PAIRS)] = Field(
        default_factory=dict
    )
    timings: TimingsConfig = Field(default_factory=TimingsConfig)
    spark: SparkConfig = Field(default_factory=SparkConfig)
    placement: PlacementConfig = Field(default_factory=PlacementConfig)
    #: Extra workload types: type name -> "package.module:Class".
    workloads: Annotated[dict[str, str], Env("BATON_WORKLOADS", Decode.PAIRS)] = Field(
        default_factory=dict
    )
    #: Live channels (see baton.channels.config; env BATON_CHANNELS as JSON).
    channels: Annotated[ChannelsConfig, Env("BATON_CHANNELS", Decode.JSON)] = Field(
        default_factory=ChannelsConfig
    )
    #: Store failover roles run by this agent (see baton.failover.roles; docs/failover.md).
    redis_failover: dict[str, Any] | None = None

    @classmethod
    def missing(cls, where: str) -> str:
        var = next((v for v, (_, path) in env_vars(cls).items() if ".".join(path) == where), None)
        return f"set it in the file or as {var}" if var else "set it in the file"

    @field_validator("node_id")
    @classmethod
    def _node_id(cls, v: str) -> str:
        if not _ID.match(v):
            raise ValueError("use 1-63 letters, digits, '.', '_' or '-', starting alphanumeric")
        return v

    @field_validator("listen", "advertise")
    @classmethod
    def _address(cls, v: str | None) -> str | None:
        if v is None:
            return v
        m = _ADDR.match(v)
        if not m or not 0 <= int(m["port"]) <= 65535:
            raise ValueError("expected host:port, for example 127.0.0.1:7400")
        return v

    @field_validator("workloads")
    @classmethod
    def _workloads(cls, v: dict[str, str]) -> dict[str, str]:
        from baton.placement.workload import load_types  # imports user code: only when asked

        try:
            load_types(v)
        except ConfigError as exc:
            raise ValueError(str(exc)) from None
        return v

    @field_validator("redis_failover")
    @classmethod
    def _redis_failover(cls, v: dict[str, Any] | None) -> dict[str, Any] | None:
        from baton.failover.roles import parse

        if v is not None:
            try:
                parse(v)
            except ConfigError as exc:
                raise ValueError(str(exc)) from None
        return v

    @field_validator("store")
    @classmethod
    def _store(cls, v: str) -> str:
        try:
            open_store(v)
        except ConfigError as exc:
            raise ValueError(str(exc)) from None
        return v

    @model_validator(mode="after")
    def _token(self) -> NodeConfig:
        if self.token is None and self.token_file is None:
            raise ValueError("no cluster token: set token_file (or token, or BATON_TOKEN)")
        if self.token is not None and len(self.token) < 16:
            raise ValueError("token: too short; use at least 16 characters")
        if self.token is None and self.token_file is not None:
            try:
                text = self.token_file.read_text().strip()
            except OSError as exc:
                raise ValueError(
                    f"token_file: cannot read {self.token_file}: {exc.strerror}"
                ) from None
            if len(text) < 16:
                raise ValueError(f"token_file: {self.token_file} holds fewer than 16 characters")
            object.__setattr__(self, "token", text)
        try:
            lease = self.timings.build()  # contradictions surface here, naming the values
        except ConfigError as exc:
            raise ValueError(f"timings: {exc}") from None
        try:
            self.channels.timings(lease)
        except ConfigError as exc:
            raise ValueError(f"channels: {exc}") from None
        return self

    @property
    def cluster_token(self) -> str:
        assert self.token is not None
        return self.token

    @property
    def advertised(self) -> str:
        return self.advertise or self.listen

    def host_port(self) -> tuple[str, int]:
        host, _, port = self.listen.rpartition(":")
        return host.strip("[]"), int(port)

    def safe_dict(self) -> dict[str, Any]:
        """The configuration for display: no token, store password redacted."""
        out = self.model_dump(mode="json", exclude={"token"})
        out["store"] = redact_url(self.store)
        return out


def load(path: Path | None, env: Mapping[str, str] | None = None) -> NodeConfig:
    """Read ``path`` (TOML, optional) and the environment (``os.environ`` unless given), the
    environment winning key by key; validate; return the config."""
    return NodeConfig.load(
        Environment(NodeConfig, os.environ if env is None else env), TomlFile(NodeConfig, path)
    )
