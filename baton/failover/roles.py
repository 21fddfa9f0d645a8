"""The store-failover roles a long-running process (the node agent) runs from one
``[redis_failover]`` table::

    [redis_failover]                 # the client role: this host's master file
    client_id = "rcc-1"
    master_file = "/var/lib/baton/redis-master"
    listen = "10.0.1.1:9101"

    [redis_failover.server]          # the server role (optional; on one or more nodes)
    redis_servers = ["10.0.0.1:6379", "10.0.0.2:6379"]
    clients = { rcc-1 = "10.0.1.1:9101", rcc-2 = "10.0.1.2:9101" }
    server_id = "node-a"

The server role does not wait to be the cluster's controller: the controller's lease lives in
the store, and with a Redis store that is the Redis being replaced, so a controller-only server
would lose its role exactly when it is needed. Rounds are ordered by their tokens, so several
servers running at once are safe (see :mod:`baton.failover.decide`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from baton.errors import ConfigError
from baton.failover.config import ClientConfig, ServerConfig, client_config, server_config

if TYPE_CHECKING:  # the server needs redis-py, imported only when the role runs
    from baton.failover.server import ConfigurationServer

log = logging.getLogger("baton.failover")


@dataclass(frozen=True)
class RolesConfig:
    client: ClientConfig | None
    server: ServerConfig | None


def parse(table: Any) -> RolesConfig:
    """Validate a ``[redis_failover]`` table: the client role from its keys (when it has a
    ``client_id``), the server role from its ``server`` sub-table."""
    if not isinstance(table, dict):
        raise ConfigError("bad [redis_failover]: expected a table")
    own = {k: v for k, v in table.items() if k != "server"}
    server = table.get("server")
    if server is not None and not isinstance(server, dict):
        raise ConfigError("bad [redis_failover.server]: expected a table")
    if not own and server is None:
        raise ConfigError(
            "[redis_failover] is empty: give client_id, master_file and listen, and/or a "
            "[redis_failover.server] table"
        )
    return RolesConfig(
        client=client_config(own) if own else None,
        server=server_config(server) if server is not None else None,
    )


class Roles:
    """Runs the configured roles as tasks of the current event loop."""

    def __init__(self, config: RolesConfig) -> None:
        self.config = config
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        #: The configuration server this process runs (its metrics join the node agent's).
        self.server: ConfigurationServer | None = None

    async def start(self) -> None:
        from baton.failover.client import run_client
        from baton.failover.serve import run_server

        if self.config.client is not None:
            self._tasks.append(
                asyncio.create_task(self._guard(run_client(self.config.client, self._stop)))
            )
        if self.config.server is not None:
            from baton.failover.server import ConfigurationServer

            self.server = ConfigurationServer(self.config.server)
            serving = run_server(self.config.server, self._stop, self.server)
            self._tasks.append(asyncio.create_task(self._guard(serving)))

    @staticmethod
    async def _guard(role: Any) -> None:
        try:
            await role
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("store-failover role stopped")

    async def stop(self) -> None:
        self._stop.set()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, TimeoutError):
                await asyncio.wait_for(task, 5)
        self._tasks.clear()


__all__ = ["Roles", "RolesConfig", "parse"]
