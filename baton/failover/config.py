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
``BATON_FAILOVER_TOKEN`` for the token.
"""

from __future__ import annotations

import math
import os
import re
import socket
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from baton.errors import ConfigError
from baton.failover.decide import check_server_id, parse_servers
from baton.store.master_file import Address, check_master_path, parse_address

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


def _seconds(name: str, value: Any, low: float, high: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ConfigError(f"bad {name} {value!r}: expected a number of seconds")
    if not low <= value <= high:
        raise ConfigError(f"bad {name} {value!r}: use {low:g} to {high:g} seconds")
    return float(value)


def _token(data: dict[str, Any]) -> str | None:
    token = data.get("token") or os.environ.get("BATON_FAILOVER_TOKEN") or None
    token_file = data.get("token_file")
    if token_file:
        try:
            token = Path(token_file).read_text().strip()
        except OSError as exc:
            raise ConfigError(f"cannot read token file {token_file}: {exc.strerror}") from None
    if token is not None and (not isinstance(token, str) or len(token) < 16):
        raise ConfigError("bad failover token: use at least 16 characters (value not shown)")
    return token


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
    if path is None:
        return {}
    try:
        data = tomllib.loads(Path(path).read_text())
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"bad TOML in {path}: {exc}") from None
    table = data.get("redis_failover", data)
    if not isinstance(table, dict):
        raise ConfigError(f"bad [redis_failover] in {path}: expected a table")
    return dict(table)


_SERVER_KEYS = {
    "server_id", "redis_servers", "clients", "client_ids", "listen", "check_interval",
    "retries", "request_timeout", "reconfigure_interval", "token", "token_file",
    "redis_password",
}  # fmt: skip
_CLIENT_KEYS = {
    "client_id", "master_file", "listen", "state_file", "check_timeout", "token",
    "token_file", "redis_password",
}  # fmt: skip


def _unknown(data: dict[str, Any], known: set[str], role: str) -> None:
    extra = sorted(set(data) - known)
    if extra:
        raise ConfigError(
            f"unknown {role} setting {extra[0]!r}: known are {', '.join(sorted(known))}"
        )


def server_config(data: dict[str, Any]) -> ServerConfig:
    """Validate a server's settings (file keys overridden by command-line options)."""
    data = {k: v for k, v in data.items() if v is not None}
    _unknown(data, _SERVER_KEYS | {"client_id", "master_file", "state_file", "check_timeout"},
             "server")  # fmt: skip
    if "redis_servers" not in data:
        raise ConfigError("no Redis servers given: use --redis-servers H:P,H:P,...")
    servers = parse_servers(data["redis_servers"])
    clients_raw = data.get("clients", data.get("client_ids"))
    if clients_raw is None:
        raise ConfigError("no clients given: use --client-ids id@host:port,... (every client)")
    retries = data.get("retries", 3)
    if isinstance(retries, bool) or not isinstance(retries, int) or not 0 <= retries <= 100:
        raise ConfigError(f"bad retries {retries!r}: use a whole number from 0 to 100")
    listen = data.get("listen")
    return ServerConfig(
        redis_servers=servers,
        clients=parse_clients(clients_raw),
        server_id=check_server_id(str(data.get("server_id") or socket.gethostname())),
        listen=None if not listen else parse_address(str(listen), what="listen address"),
        check_interval=_seconds("check_interval", data.get("check_interval", 0.5), 0.01, 60),
        retries=retries,
        request_timeout=_seconds("request_timeout", data.get("request_timeout", 1.0), 0.05, 60),
        reconfigure_interval=_seconds(
            "reconfigure_interval", data.get("reconfigure_interval", 2.0), 0.05, 3600
        ),
        token=_token(data),
        redis_password=data.get("redis_password"),
    )


def client_config(data: dict[str, Any]) -> ClientConfig:
    """Validate a client's settings (file keys overridden by command-line options)."""
    data = {k: v for k, v in data.items() if v is not None}
    _unknown(data, _CLIENT_KEYS | _SERVER_KEYS, "client")
    if "client_id" not in data:
        raise ConfigError("no client id given: use --client-id ID")
    cid = check_client_id(data["client_id"])
    if "master_file" not in data:
        raise ConfigError("no master file given: use --master-file PATH")
    master_file = check_master_path(Path(data["master_file"]))
    if "listen" not in data:
        raise ConfigError("no listen address given: use --listen HOST:PORT")
    state_file = Path(data.get("state_file") or f"{master_file}.state").absolute()
    if state_file == master_file:
        raise ConfigError(f"bad state_file {state_file}: it must not be the master file")
    check_master_path(state_file)
    return ClientConfig(
        client_id=cid,
        master_file=master_file,
        listen=parse_address(str(data["listen"]), what="listen address"),
        state_file=state_file,
        check_timeout=_seconds("check_timeout", data.get("check_timeout", 0.5), 0.01, 60),
        token=_token(data),
        redis_password=data.get("redis_password"),
    )


__all__ = [
    "ClientConfig",
    "ServerConfig",
    "check_client_id",
    "client_config",
    "load_table",
    "parse_clients",
    "server_config",
]
