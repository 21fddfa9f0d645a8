"""The configuration server's entry points: :func:`run_server` runs the role (its loop and,
with ``listen``, its status API) in a node agent or ``baton redis-failover server``, and
:func:`switch` is the planned switch of ``baton redis-failover switch``."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from baton.errors import ConfigError, FailoverError
from baton.failover.client import bind, http_server
from baton.failover.config import ServerConfig
from baton.failover.server import ConfigurationServer
from baton.failover.status import build_app
from baton.store.master_file import Address

log = logging.getLogger("baton.failover.server")


async def run_server(
    config: ServerConfig, stop: asyncio.Event, server: ConfigurationServer | None = None
) -> None:
    """Run the server role (and its status API when ``listen`` is set) until ``stop``;
    ``server``: the one to run (made from ``config`` if not given, as the command does)."""
    server = server if server is not None else ConfigurationServer(config)
    serving: asyncio.Future[None] | None = None
    http = None
    if config.listen is not None:
        sock = bind(config.listen)
        http = http_server(build_app(server), config.listen)
        serving = asyncio.ensure_future(http.serve(sockets=[sock]))
    log.info(
        "configuration server started",
        extra={
            "server": config.server_id,
            "redis_servers": ",".join(str(a) for a in config.redis_servers),
            "clients": ",".join(config.clients),
        },
    )
    try:
        await server.run(stop)
    finally:
        if http is not None and serving is not None:
            http.should_exit = True
            with contextlib.suppress(Exception):
                await serving
        await server.close()


async def switch(config: ServerConfig, new: Address, timeout: float = 30.0) -> dict[str, Any]:
    """A planned switch to ``new``: a round with a token above every running server's (they
    adopt it at their next periodic reconfigure), writes paused on the old master until the
    new one caught up, so no acknowledged write is lost."""
    if new not in config.redis_servers:
        raise ConfigError(
            f"{new} is not one of the Redis servers ({', '.join(map(str, config.redis_servers))})"
        )
    server = ConfigurationServer(config)
    try:
        await server.discover()
        old = server.seen.master
        if old is None:
            raise FailoverError("no current master found: nothing to switch from")
        if old == new:
            raise ConfigError(f"{new} is already the master: nothing to do")
        info = await server.redis.info(new)
        if not info.reachable:
            raise FailoverError(f"{new} does not answer: choose a reachable replica")
        if info.role != "slave" or info.master_of != old:
            raise FailoverError(f"{new} is not a replica of the master {old}: wait until it is")
        try:
            await server.round(
                old=old, check=False, new=new, planned=True, catch_up_timeout=timeout
            )
        except FailoverError:
            if server.invalidated is None:
                raise  # held back before every client invalidated: nothing to undo
            # Every client invalidated but the new master did not catch up: give the clients
            # the old master back with a round of our own, then report.
            with contextlib.suppress(FailoverError):
                await server.round(old=None, check=False, new=old)
            raise
        return server.status()
    finally:
        await server.close()


__all__ = ["run_server", "switch"]
