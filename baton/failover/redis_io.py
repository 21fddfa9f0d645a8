"""What a configuration server says to the Redis servers it manages: read their role, offset
and round token, make one a replica or the master, pause and resume writes, read the clock.

One client per server, bounded by the request timeout and never retried (a retry would turn one
unanswered check into several); any error drops the client, so the next call reconnects. The
decisions (which server, when) are not made here: see :mod:`baton.failover.server`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import RedisError

from baton import logs
from baton.errors import ConfigError, FailoverError
from baton.failover.decide import ServerInfo, Token
from baton.store.master_file import Address, parse_address

log = logging.getLogger("baton.failover.server")

#: Where a master keeps the token of the round that made it master (replicated to replicas).
TOKEN_KEY = "baton:failover:token"

# Raise the key only: two servers establishing the same master keep the newest token.
_RAISE_TOKEN = """
local cur = redis.call('GET', KEYS[1])
if cur then
  local g, s = string.match(cur, '^(%d+) (.*)$')
  if g then
    local ng = tonumber(ARGV[1])
    if tonumber(g) > ng or (tonumber(g) == ng and s >= ARGV[2]) then
      return 0
    end
  end
end
redis.call('SET', KEYS[1], ARGV[1] .. ' ' .. ARGV[2])
return 1
"""


class RedisServers:
    """The managed Redis servers, as one configuration server reaches them."""

    def __init__(self, servers: list[Address], timeout: float, password: str | None) -> None:
        self.servers = servers
        self.timeout = timeout
        self._password = password
        self._clients: dict[Address, aioredis.Redis] = {}

    def client(self, address: Address) -> aioredis.Redis:
        client = self._clients.get(address)
        if client is None:
            client = aioredis.Redis(
                host=address.host,
                port=address.port,
                password=self._password,
                socket_timeout=self.timeout,
                socket_connect_timeout=self.timeout,
                retry=Retry(NoBackoff(), 0),
            )
            self._clients[address] = client
        return client

    async def drop(self, address: Address) -> None:
        client = self._clients.pop(address, None)
        if client is not None:
            with contextlib.suppress(RedisError, OSError):
                await client.aclose()

    async def close(self) -> None:
        for client in self._clients.values():
            with contextlib.suppress(RedisError, OSError):
                await client.aclose()
        self._clients.clear()

    async def clock(self, address: Address) -> float | None:
        """The server's clock (``TIME``, seconds) if it answers, else None."""
        try:
            async with asyncio.timeout(self.timeout):
                sec, usec = await self.client(address).time()
            return int(sec) + int(usec) / 1e6
        except (RedisError, OSError, TimeoutError):
            await self.drop(address)
            return None

    async def info(self, address: Address) -> ServerInfo:
        try:
            async with asyncio.timeout(self.timeout):
                r = self.client(address)
                rep = await r.info("replication")
                space = await r.info("keyspace")
                raw = await r.get(TOKEN_KEY)
        except (RedisError, OSError, TimeoutError):
            await self.drop(address)
            return ServerInfo(address, reachable=False)
        role = str(rep.get("role", ""))
        master_of = None
        link_up = rep.get("master_link_status") == "up"
        synced = True
        if role == "slave":
            with contextlib.suppress(ConfigError):
                master_of = parse_address(f"{rep.get('master_host')}:{rep.get('master_port')}")
            offset = int(rep.get("slave_repl_offset", -1))
            # Redis says -1 while the link has never been up since the server started.
            synced = link_up or int(rep.get("master_link_down_since_seconds", -1)) >= 0
        else:
            offset = int(rep.get("master_repl_offset", -1))
        keys = sum(int(db.get("keys", 0)) for db in space.values() if isinstance(db, dict))
        return ServerInfo(
            address,
            reachable=True,
            role=role,
            offset=offset,
            master_of=master_of,
            link_up=link_up,
            token=Token.decode(raw),
            keys=keys,
            synced=synced,
        )

    async def infos(self) -> list[ServerInfo]:
        return list(await asyncio.gather(*(self.info(a) for a in self.servers)))

    async def replicate(self, server: Address, master: Address) -> None:
        """Make ``server`` a replica of ``master``; a failure is logged (the next periodic
        reconfigure tries again)."""
        try:
            r = self.client(server)
            # A replica syncs at once instead of after the default 5 s delay.
            await r.config_set("repl-diskless-sync-delay", 0)
            await r.replicaof(master.host, master.port)
            log.info("made a replica", extra={"server": str(server), "master": str(master)})
        except (RedisError, OSError, TimeoutError) as exc:
            await self.drop(server)
            log.warning(
                "could not make a replica",
                extra={"server": str(server), "error": logs.describe(exc)},
            )

    async def raise_token(self, address: Address, token: Token) -> None:
        """Give ``address`` the round token ``token`` unless it carries a newer one."""
        await self.client(address).eval(_RAISE_TOKEN, 1, TOKEN_KEY, token.generation, token.server)

    async def token(self, address: Address) -> Token | None:
        """The round token ``address`` carries."""
        return Token.decode(await self.client(address).get(TOKEN_KEY))

    async def promote(self, new: Address, token: Token) -> None:
        """Make ``new`` a master carrying ``token``. Raises the driver's error."""
        r = self.client(new)
        await r.replicaof("NO", "ONE")
        # A planned switch whose server died while it waited left writes paused on its old
        # master; a round that names that master again lifts the pause.
        await r.execute_command("CLIENT", "UNPAUSE")  # type: ignore[no-untyped-call]
        await self.raise_token(new, token)

    async def unpause(self, address: Address) -> None:
        """Lift a write pause; a server that does not answer keeps it until it runs out."""
        with contextlib.suppress(RedisError, OSError):
            await self.client(address).execute_command("CLIENT", "UNPAUSE")  # type: ignore[no-untyped-call]

    async def catch_up(self, old: Address, new: Address, timeout: float, token: Token) -> None:
        """Planned switch: stop writes on the old master (``CLIENT PAUSE WRITE``: a write that
        was already on its way waits, then fails once the old master is a replica), then wait
        until the new master's replication offset reaches the old master's."""
        r_old = self.client(old)
        try:
            pause_ms = str(int(timeout * 1000) + 5000)
            await r_old.execute_command("CLIENT", "PAUSE", pause_ms, "WRITE")  # type: ignore[no-untyped-call]
            target = int((await r_old.info("replication"))["master_repl_offset"])
        except (RedisError, OSError, KeyError) as exc:
            raise FailoverError(
                f"round {token}: could not pause writes on {old}: {logs.describe(exc)}"
            ) from None
        deadline = time.monotonic() + timeout
        while True:
            info = await self.info(new)
            if info.reachable and info.role == "slave" and info.master_of == old:
                if info.offset >= target:
                    log.info(
                        "new master caught up",
                        extra={"round": str(token), "offset": target, "new": str(new)},
                    )
                    return
            elif info.reachable and info.role != "slave":
                break
            if time.monotonic() > deadline:
                break
            await asyncio.sleep(0.01)
        await self.unpause(old)
        raise FailoverError(
            f"round {token}: {new} did not catch up with {old} (offset {target}) in {timeout:g}s; "
            "nothing was promoted: run the switch again"
        )

    async def wait_for_clock(self, address: Address, fence: float, limit: float) -> None:
        """Return once ``address``'s clock is past ``fence``; :class:`FailoverError` when it
        stays behind for ``limit`` seconds (the clocks need fixing, not a longer wait)."""
        deadline = time.monotonic() + limit
        while True:
            now = await self.clock(address)
            if now is not None and now > fence:
                return
            if time.monotonic() > deadline:
                raise FailoverError(
                    f"the clock of {address} stays behind the old master's by more than "
                    f"{limit:g} s: fix the clocks (NTP) before switching"
                )
            await asyncio.sleep(0.01)


__all__ = ["TOKEN_KEY", "RedisServers"]
