"""Configuration of the store-failover roles: command-line options or a TOML file, validated
as a whole before anything starts (a bad value is one line naming it; nothing is changed).

Server (``baton redis-failover server --config FILE``)::

    server_id = "rcs-1"                     # default: the host name
    redis_servers = ["10.0.0.1:6379", "10.0.0.2:6379"]
    listen = "127.0.0.1:9100"               # optional: /v1/status and /metrics
    check_interval = 0.5                    # seconds between checks of the master
    retries = 3                             # failed checks before a round starts
    request_timeout = 1.0                   # per message to a client, per Redis call
    reconfigure_interval = 2.0              # periodic reconfigure for newcomers
    token_file = "/etc/baton/failover-token"   # or token = "...": Bearer token of the clients
    redis_password = "..."                  # when the Redis servers need one

    [clients]                               # every client id and where its role listens
    rcc-1 = "10.0.1.1:9101"
    rcc-2 = "10.0.1.2:9101"

Client (``baton redis-failover client --config FILE``)::

    client_id = "rcc-1"
    master_file = "/var/lib/baton/redis-master"
    listen = "0.0.0.0:9101"
    state_file = "/var/lib/baton/redis-master.state"   # default: master_file + ".state"
    check_timeout = 0.5                     # how long the old master gets to answer a check
    token_file = "/etc/baton/failover-token"

The same keys may sit in a ``[redis_failover]`` table, the server's in its ``server`` sub-table
(how a node agent's config carries both roles: see :mod:`baton.failover.roles`). Environment:
``BATON_FAILOVER_TOKEN`` for the token (when neither the options nor the file give one).

Read as every baton configuration is (:mod:`baton.settings`): :class:`ServerSettings` and
:class:`ClientSettings` validate the whole, and build the value objects the roles run with
(:class:`ServerConfig`, :class:`ClientConfig`).
"""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, ClassVar

from pydantic import AfterValidator, AliasChoices, Field, PlainValidator, model_validator

from baton.errors import ConfigError
from baton.failover.decide import check_server_id, parse_servers
from baton.settings import Env, Environment, Settings, Values, read_toml
from baton.store.master_file import Address, check_master_path, parse_address
from baton.validation import Int, Seconds

_CLIENT_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")


def check_client_id(value: str) -> str:
    if not isinstance(value, str) or not _CLIENT_ID.match(value):
        raise ConfigError(
            f"bad client id {value!r}: use 1-63 letters, digits or '._-', starting with a "
            "letter or digit"
        )
    return value


def parse_clients(value: str | dict[str, Any]) -> dict[str, Address]:
    """``id@host:port,...`` (or a TOML table id -> "host:port") as id -> address."""
    out: dict[str, Address] = {}
    if isinstance(value, str):
        pairs: list[tuple[str, Any]] = []
        for item in (x.strip() for x in value.split(",")):
            if not item:
                continue
            cid, at, addr = item.partition("@")
            if not at:
                raise ConfigError(
                    f"bad client {item!r}: give the id and where its role listens, "
                    "for example rcc-1@127.0.0.1:9101"
                )
            pairs.append((cid, addr))
    elif isinstance(value, dict):
        pairs = list(value.items())
    else:
        raise ConfigError("bad clients: expected id@host:port,... or a table id = 'host:port'")
    for cid, addr in pairs:
        check_client_id(cid)
        if cid in out:
            raise ConfigError(f"client id {cid!r} is listed twice")
        if not isinstance(addr, str):
            raise ConfigError(f"bad address of client {cid!r}: expected 'host:port'")
        out[cid] = parse_address(addr, what=f"address of client {cid!r}")
    if not out:
        raise ConfigError("no clients given: use --client-ids id@host:port,... (every client)")
    return out


def _servers(value: Any) -> list[Address]:
    if not isinstance(value, str | list):
        raise ConfigError("expected H:P,H:P,... or a list of 'host:port'")
    return parse_servers(value)


def _listen(value: Any) -> Address:
    if isinstance(value, Address):
        return value
    if not isinstance(value, str):
        raise ConfigError("expected 'host:port'")
    return parse_address(value, what="listen address")


def _listen_or_none(value: Any) -> Address | None:
    return None if not value else _listen(value)


@dataclass(frozen=True)
class ServerConfig:
    redis_servers: list[Address]
    clients: dict[str, Address]
    server_id: str = field(default_factory=socket.gethostname)
    listen: Address | None = None
    check_interval: float = 0.5
    retries: int = 3
    request_timeout: float = 1.0
    reconfigure_interval: float = 2.0
    token: str | None = field(default=None, repr=False)
    redis_password: str | None = field(default=None, repr=False)

    def client_url(self, cid: str) -> str:
        return f"http://{self.clients[cid]}"


@dataclass(frozen=True)
class ClientConfig:
    client_id: str
    master_file: Path
    listen: Address
    state_file: Path
    check_timeout: float = 0.5
    token: str | None = field(default=None, repr=False)
    redis_password: str | None = field(default=None, repr=False)


def load_table(path: Path | None) -> dict[str, Any]:
    """The TOML file's keys (those of its ``[redis_failover]`` table if it has one)."""
    return {} if path is None else read_toml(path, "redis_failover")


class _Role(Settings):
    """What both roles share: the token between them, the Redis password, the wording."""

    docs: ClassVar[str] = "docs/failover.md"
    #: The other role's keys: a file that configures both roles is read by each.
    others: ClassVar[frozenset[str]] = frozenset()
    #: What to do about each required key that is missing.
    hints: ClassVar[dict[str, str]] = {}

    token: Annotated[str | None, Env("BATON_FAILOVER_TOKEN")] = Field(default=None, repr=False)
    token_file: Path | None = None
    redis_password: str | None = Field(default=None, repr=False)

    @classmethod
    def missing(cls, where: str) -> str:
        return cls.hints.get(where, f"set {where}")

    @model_validator(mode="before")
    @classmethod
    def _own_keys(cls, data: Any) -> Any:
        if isinstance(data, dict):
            return {k: v for k, v in data.items() if k not in cls.others}
        return data

    @model_validator(mode="after")
    def _read_token(self) -> _Role:
        token = self.token or None
        if self.token_file is not None:
            try:
                token = Path(self.token_file).read_text().strip()
            except OSError as exc:
                raise ConfigError(
                    f"cannot read token file {self.token_file}: {exc.strerror}"
                ) from None
        if token is not None and len(token) < 16:
            raise ConfigError("bad failover token: use at least 16 characters (value not shown)")
        object.__setattr__(self, "token", token)
        return self


class ServerSettings(_Role):
    """A configuration server's settings (see the module's docstring)."""

    noun: ClassVar[str] = "server config"
    key: ClassVar[str] = "server setting"
    others: ClassVar[frozenset[str]] = frozenset(
        {"client_id", "master_file", "state_file", "check_timeout"}
    )
    hints: ClassVar[dict[str, str]] = {
        "redis_servers": "no Redis servers given: use --redis-servers H:P,H:P,...",
        "clients": "no clients given: use --client-ids id@host:port,... (every client)",
    }

    redis_servers: Annotated[list[Address], PlainValidator(_servers)]
    clients: Annotated[dict[str, Address], PlainValidator(parse_clients)] = Field(
        validation_alias=AliasChoices("clients", "client_ids")
    )
    server_id: Annotated[str, AfterValidator(check_server_id)] = Field(
        default_factory=socket.gethostname
    )
    listen: Annotated[Address | None, PlainValidator(_listen_or_none)] = None
    check_interval: Seconds = Field(default=0.5, ge=0.01, le=60)
    retries: Int = Field(default=3, ge=0, le=100)
    request_timeout: Seconds = Field(default=1.0, ge=0.05, le=60)
    reconfigure_interval: Seconds = Field(default=2.0, ge=0.05, le=3600)

    def build(self) -> ServerConfig:
        return ServerConfig(
            redis_servers=self.redis_servers,
            clients=self.clients,
            server_id=self.server_id,
            listen=self.listen,
            check_interval=self.check_interval,
            retries=self.retries,
            request_timeout=self.request_timeout,
            reconfigure_interval=self.reconfigure_interval,
            token=self.token,
            redis_password=self.redis_password,
        )


class ClientSettings(_Role):
    """A configuration client's settings (see the module's docstring)."""

    noun: ClassVar[str] = "client config"
    key: ClassVar[str] = "client setting"
    others: ClassVar[frozenset[str]] = frozenset(
        {
            "server_id", "redis_servers", "clients", "client_ids", "check_interval", "retries",
            "request_timeout", "reconfigure_interval",
        }
    )  # fmt: skip
    hints: ClassVar[dict[str, str]] = {
        "client_id": "no client id given: use --client-id ID",
        "master_file": "no master file given: use --master-file PATH",
        "listen": "no listen address given: use --listen HOST:PORT",
    }

    client_id: Annotated[str, AfterValidator(check_client_id)]
    master_file: Annotated[Path, AfterValidator(check_master_path)]
    listen: Annotated[Address, PlainValidator(_listen)]
    #: Default: the master file's path + ``.state``.
    state_file: Path | None = None
    check_timeout: Seconds = Field(default=0.5, ge=0.01, le=60)

    @model_validator(mode="after")
    def _state_file(self) -> ClientSettings:
        state_file = Path(self.state_file or f"{self.master_file}.state").absolute()
        if state_file == self.master_file:
            raise ConfigError(f"bad state_file {state_file}: it must not be the master file")
        object.__setattr__(self, "state_file", check_master_path(state_file))
        return self

    def build(self) -> ClientConfig:
        assert self.state_file is not None  # set by _state_file
        return ClientConfig(
            client_id=self.client_id,
            master_file=self.master_file,
            listen=self.listen,
            state_file=self.state_file,
            check_timeout=self.check_timeout,
            token=self.token,
            redis_password=self.redis_password,
        )


def server_config(data: Mapping[str, Any], env: Mapping[str, str] | None = None) -> ServerConfig:
    """Validate a server's settings (file keys overridden by command-line options; a ``None``
    value is not given), then the environment (``os.environ`` unless given)."""
    env = os.environ if env is None else env
    return ServerSettings.load(
        Values(ServerSettings, data), Environment(ServerSettings, env)
    ).build()


def client_config(data: Mapping[str, Any], env: Mapping[str, str] | None = None) -> ClientConfig:
    """Validate a client's settings (as :func:`server_config`)."""
    env = os.environ if env is None else env
    return ClientSettings.load(
        Values(ClientSettings, data), Environment(ClientSettings, env)
    ).build()


__all__ = [
    "ClientConfig",
    "ClientSettings",
    "ServerConfig",
    "ServerSettings",
    "check_client_id",
    "client_config",
    "load_table",
    "parse_clients",
    "server_config",
]
