"""The configuration server (seed 002's RCS): watches the Redis master and switches only when
every client agrees.

The loop (every ``check_interval``):

1. ``PING`` and ``TIME`` on the master. A failure is retried ``retries`` times (one per check)
   before a round starts.
2. A round gets a new :class:`~baton.failover.decide.Token`, above every token seen, and sends
   ``ping`` to *every* known client; each answers ``pong`` only if the master does not answer
   from its host either. One missing or refusing client holds the switch back: a warning line,
   the ``baton_failover_held_back`` metric, and ``status`` say which and why.
3. ``invalidate`` to every client: each empties its master file (no worker on its host sends
   anything to the old master from then on) and answers ``invalidated``; all must answer.
4. The replica with the most advanced replication offset is promoted (``REPLICAOF NO ONE``) and
   gets the round's token (the key ``baton:failover:token``, replicated from then on). Before it
   is announced, its clock must have passed the last ``TIME`` read on the old master, so every
   fencing epoch it grants (at least its clock) is above those granted before. Never a server
   that is empty and never synced (restarted without its data): with no other, the switch is
   held back until the master returns.
5. ``reconfigure`` with the new master to every client; every other server is made its replica.

Between rounds it sends a periodic ``reconfigure`` (for newcomers and restarted clients), and,
only when every client accepted it, makes every other server a replica of the master: a
returning old master (whose token is older) becomes a replica, never a second master.

Several servers may run at once. A server that meets a newer round (a ``stale`` answer, or a
master carrying a newer token) adopts it: it takes the master with the newest token as the
current one and never demotes it. A planned switch (:func:`switch`) is a round of its own with
``check`` off, run by the ``switch`` command with a token above every running server's.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx
import redis.asyncio as aioredis
from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import RedisError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from baton import logs
from baton.errors import ConfigError, FailoverError
from baton.failover.client import bind, http_server
from baton.failover.config import ServerConfig
from baton.failover.decide import (
    Answer,
    ClientReport,
    ClientState,
    RoundOutlook,
    ServerInfo,
    Token,
    believed_master,
    choose_replica,
    first_master,
    round_outlook,
)
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


#: Seconds a promotion waits for the new master's clock to pass the old master's: a skew past
#: this needs the clocks fixed, not a longer wait.
CLOCK_FENCE_LIMIT = 30.0


class Metrics:
    """What the server exposes on ``/metrics``."""

    def __init__(self) -> None:
        self.registry = r = CollectorRegistry()
        self.rounds = Counter(
            "baton_failover_rounds_total", "Failover rounds by outcome", ["outcome"], registry=r
        )
        self.held_back = Gauge(
            "baton_failover_held_back",
            "1 while a switch is held back because a client did not confirm",
            registry=r,
        )
        self.master_up = Gauge(
            "baton_failover_master_up", "1 while the master answers the server", registry=r
        )
        self.confirming = Gauge(
            "baton_failover_clients_confirming",
            "Clients that answered the last message of a round",
            registry=r,
        )


@dataclass
class Reply:
    client: str
    answer: str | None
    """None: not reached (or an error); the reason says why."""
    reason: str = ""
    report: ClientReport | None = None
    """The client's state after answering (None when it did not answer)."""

    @property
    def highest(self) -> Token | None:
        return None if self.report is None else self.report.state.highest

    def to_json(self) -> dict[str, Any]:
        state = None if self.report is None else self.report.state
        return {
            "client": self.client,
            "answer": self.answer,
            "reason": self.reason,
            **(ClientState() if state is None else state).to_json(),
            "master": None
            if self.report is None or self.report.master is None
            else str(self.report.master),
        }


def _report(data: dict[str, Any]) -> ClientReport:
    """A client's ``/v1/state`` (or an answer carrying it) as a :class:`ClientReport`;
    :class:`ConfigError` when it is not one."""
    master = data.get("master")
    quiet = data.get("quiet", 0.0)
    return ClientReport(
        ClientState.from_json(data),
        None if not master else parse_address(str(master)),
        float(quiet) if isinstance(quiet, int | float) and not isinstance(quiet, bool) else 0.0,
    )


@dataclass
class Observed:
    """The server's picture, for ``status`` and ``/v1/status``."""

    master: Address | None = None
    master_token: Token | None = None
    last_round: dict[str, Any] | None = None
    alerts: list[str] = field(default_factory=list)


class ConfigurationServer:
    """One configuration server. :meth:`run` is the loop; :meth:`round` one switch."""

    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self.metrics = Metrics()
        self.generation = 0
        self.seen = Observed()
        self._failures = 0
        self._last_time: float = 0.0
        """The master's clock (``TIME``, seconds) at its last successful check."""
        self._next_periodic = 0.0
        self._next_round = 0.0
        self.invalidated: Token | None = None
        """The round in which every client invalidated, until its reconfigure was sent."""
        # A client answers a ping or an invalidate after trying the old master for up to
        # request_timeout (sent as check_timeout): wait for that, plus a request's own time.
        self._http = httpx.AsyncClient(
            timeout=2 * config.request_timeout + 0.5,
            headers={"authorization": f"Bearer {config.token}"} if config.token else {},
        )
        self._redis: dict[Address, aioredis.Redis] = {}

    async def close(self) -> None:
        await self._http.aclose()
        for client in self._redis.values():
            with contextlib.suppress(RedisError, OSError):
                await client.aclose()
        self._redis.clear()

    # -- Redis --------------------------------------------------------------------------------

    def _r(self, address: Address) -> aioredis.Redis:
        client = self._redis.get(address)
        if client is None:
            t = self.config.request_timeout
            client = aioredis.Redis(
                host=address.host,
                port=address.port,
                password=self.config.redis_password,
                socket_timeout=t,
                socket_connect_timeout=t,
                retry=Retry(NoBackoff(), 0),
            )
            self._redis[address] = client
        return client

    async def _drop(self, address: Address) -> None:
        client = self._redis.pop(address, None)
        if client is not None:
            with contextlib.suppress(RedisError, OSError):
                await client.aclose()

    async def check(self, address: Address) -> float | None:
        """The server's clock if it answers, else None."""
        try:
            async with asyncio.timeout(self.config.request_timeout):
                sec, usec = await self._r(address).time()
            return int(sec) + int(usec) / 1e6
        except (RedisError, OSError, TimeoutError):
            await self._drop(address)
            return None

    async def info(self, address: Address) -> ServerInfo:
        try:
            async with asyncio.timeout(self.config.request_timeout):
                r = self._r(address)
                rep = await r.info("replication")
                space = await r.info("keyspace")
                raw = await r.get(TOKEN_KEY)
        except (RedisError, OSError, TimeoutError):
            await self._drop(address)
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
        return list(await asyncio.gather(*(self.info(a) for a in self.config.redis_servers)))

    async def _replicate(self, server: Address, master: Address) -> None:
        try:
            r = self._r(server)
            # A replica syncs at once instead of after the default 5 s delay.
            await r.config_set("repl-diskless-sync-delay", 0)
            await r.replicaof(master.host, master.port)
            log.info("made a replica", extra={"server": str(server), "master": str(master)})
        except (RedisError, OSError, TimeoutError) as exc:
            await self._drop(server)
            log.warning(
                "could not make a replica",
                extra={"server": str(server), "error": logs.describe(exc)},
            )

    async def _raise_token(self, address: Address, token: Token) -> None:
        await self._r(address).eval(_RAISE_TOKEN, 1, TOKEN_KEY, token.generation, token.server)

    # -- clients ------------------------------------------------------------------------------

    async def send(self, cid: str, kind: str, body: Mapping[str, Any]) -> Reply:
        url = f"{self.config.client_url(cid)}/v1/{kind}"
        try:
            res = await self._http.post(url, json={"client": cid, **body})
        except httpx.HTTPError as exc:
            return Reply(cid, None, f"not reached: {logs.describe(exc)}")
        try:
            data = res.json()
        except ValueError:
            data = {}
        if res.status_code != 200 or not isinstance(data, dict):
            detail = data.get("error") if isinstance(data, dict) else None
            return Reply(cid, None, f"answered {res.status_code}: {detail or res.text[:200]}")
        try:
            return Reply(cid, str(data.get("answer")), str(data.get("reason") or ""), _report(data))
        except ConfigError as exc:
            return Reply(cid, None, f"bad answer: {exc}")

    async def broadcast(self, kind: str, body: Mapping[str, Any]) -> list[Reply]:
        return list(
            await asyncio.gather(*(self.send(cid, kind, body) for cid in self.config.clients))
        )

    async def client_states(self) -> dict[str, dict[str, Any] | str]:
        """Each client's ``/v1/state`` (or why it could not be read)."""

        async def one(cid: str) -> tuple[str, dict[str, Any] | str]:
            try:
                res = await self._http.get(f"{self.config.client_url(cid)}/v1/state")
            except httpx.HTTPError as exc:
                return cid, f"not reached: {logs.describe(exc)}"
            if res.status_code != 200:
                return cid, f"answered {res.status_code}"
            try:
                data = res.json()
            except ValueError:
                data = None
            if not isinstance(data, dict):
                return cid, "answered something that is not a client's state"
            if data.get("client") != cid:
                return cid, f"answered as client {data.get('client')!r}"
            return cid, data

        return dict(await asyncio.gather(*(one(c) for c in self.config.clients)))

    def _learn(self, replies: list[Reply]) -> Token | None:
        """The highest token any reply reports; raises our generation above it."""
        highest = max((r.highest for r in replies if r.highest is not None), default=None)
        if highest is not None:
            self.generation = max(self.generation, highest.generation)
        return highest

    def _next_token(self) -> Token:
        self.generation += 1
        return Token(self.generation, self.config.server_id)

    def _hold_back(self, token: Token, step: str, replies: list[Reply]) -> None:
        bad = [r for r in replies if r.answer != step]
        what = "; ".join(f"{r.client}: {r.answer or 'no answer'} ({r.reason})" for r in bad)
        alert = f"switch held back in round {token} at {step}: {what}"
        log.warning(alert, extra={"round": str(token)})
        self.metrics.held_back.set(1)
        self.metrics.rounds.labels("held_back").inc()
        self.metrics.confirming.set(len(replies) - len(bad))
        self.seen.alerts = [alert]
        self.seen.last_round = {
            "token": token.to_json(),
            "outcome": "held back",
            "step": step,
            "replies": [r.to_json() for r in replies],
            "at": time.time(),
        }

    # -- discovery ----------------------------------------------------------------------------

    async def reports(self) -> list[ClientReport]:
        """What every client that answers says of itself (``/v1/state``)."""
        out = []
        for data in (await self.client_states()).values():
            if isinstance(data, dict):
                with contextlib.suppress(ConfigError):
                    out.append(_report(data))
        return out

    async def discover(self) -> None:
        """Take the current master from the clients: the master of the newest round they
        confirmed (a token on a Redis server is never enough: a round that lost a race, or a
        master that came back with its data, carries one no client accepted). Only when no
        client confirmed a round yet (a first start) does it come from the servers and the
        files. Learns the highest round any client or server has seen."""
        reports = await self.reports()
        for r in reports:
            for t in (r.state.highest, r.state.confirmed):
                if t is not None:
                    self.generation = max(self.generation, t.generation)
        infos = await self.infos()
        for i in infos:
            if i.token is not None:
                self.generation = max(self.generation, i.token.generation)
        believed = believed_master(reports)
        if believed is not None:
            self.seen.master, self.seen.master_token = believed
        else:
            # No round confirmed yet: its round is established by the next check
            # (:meth:`_establish`).
            first = first_master(infos, reports)
            if first is not None:
                self.seen.master, self.seen.master_token = first, None
        log.info(
            "current master",
            extra={
                "master": str(self.seen.master),
                "round": str(self.seen.master_token),
                "server": self.config.server_id,
            },
        )

    # -- the loop -----------------------------------------------------------------------------

    async def tick(self) -> None:
        """One check of the master, and what follows from it."""
        master = self.seen.master
        if master is None:
            await self.discover()
            if self.seen.master is None:
                return
            master = self.seen.master
        now = await self.check(master)
        if now is not None:
            self.metrics.master_up.set(1)
            self._failures = 0
            self._last_time = max(self._last_time, now)
            if self.seen.master_token is None:
                await self._establish(master)
            if time.monotonic() >= self._next_periodic:
                self._next_periodic = time.monotonic() + self.config.reconfigure_interval
                await self.periodic()
            return
        self.metrics.master_up.set(0)
        self._failures += 1
        log.warning(
            "master does not answer",
            extra={"master": str(master), "failures": self._failures},
        )
        if self._failures > self.config.retries and time.monotonic() >= self._next_round:
            try:
                await self.round(old=master, check=True)
            except FailoverError:
                # Held back (already logged, counted and shown): try again a little later,
                # not at every check, and first learn what the clients confirmed meanwhile (a
                # racing server's round may have switched already: no second round for it).
                self._next_round = time.monotonic() + self.config.reconfigure_interval
                await self.discover()

    async def _establish(self, master: Address) -> None:
        """First start (no client confirmed any round): give the master a round of its own
        (its token raised only), which the clients confirm by applying its periodic
        reconfigure. Never over a confirmed round: a master that came back with its data would
        otherwise get the newest token of all and be taken for the current one (issue 27)."""
        reports = await self.reports()
        if not reports:
            return  # no client answers: nothing can confirm a round now
        if believed_master(reports) is not None:
            await self.discover()
            return
        token = self._next_token()
        try:
            await self._raise_token(master, token)
            raw = await self._r(master).get(TOKEN_KEY)
        except (RedisError, OSError) as exc:
            log.warning("could not mark the master", extra={"error": logs.describe(exc)})
            return
        self.seen.master_token = Token.decode(raw)

    @property
    def quiet_limit(self) -> float:
        """Seconds a round may leave its waiting clients without a word before another server
        takes it over: its server sends ``hold`` every check interval while it works."""
        return 3 * self.config.check_interval + 2 * self.config.request_timeout

    async def periodic(self) -> None:
        """Reconfigure every client with the current master; when all accepted, make every
        other server its replica. Adopts a newer confirmed round when a client reports one,
        and takes over a round whose server has gone quiet."""
        master, token = self.seen.master, self.seen.master_token
        if master is None or token is None:
            return
        replies = await self.broadcast(
            "reconfigure", {"token": token.to_json(), "master": str(master), "periodic": True}
        )
        self._learn(replies)
        reports = [r.report for r in replies if r.report is not None]
        believed = believed_master(reports)
        if believed is not None and believed[1] > token:
            log.info(
                "a newer round was confirmed: adopting its master",
                extra={"round": str(believed[1]), "master": str(believed[0])},
            )
            self.seen.master, self.seen.master_token = believed
            self._failures = 0
            self._next_periodic = 0.0
            return
        outlook = round_outlook(reports, token, self.quiet_limit)
        if outlook is RoundOutlook.ABANDONED:
            waiting = {
                r.client: r.report.state.invalidated_in
                for r in replies
                if r.report is not None and r.report.state.invalidated_in is not None
            }
            log.warning(
                "clients wait for a round whose server went quiet: taking it over",
                extra={
                    "round": str(max(waiting.values())),
                    "clients": ",".join(waiting),
                    "master": str(master),
                },
            )
            with contextlib.suppress(FailoverError):
                await self.round(old=None, check=False, new=master)
            return
        if outlook is RoundOutlook.UNDER_WAY:
            # Another server's round is at work; look again soon, to take it over in time if
            # its server dies.
            self._next_periodic = time.monotonic() + self.config.check_interval
            return
        if all(r.answer == Answer.RECONFIGURED for r in replies):
            self.metrics.held_back.set(0)
            self.seen.alerts = []
            await self.enforce_replicas()
        else:
            bad = "; ".join(
                f"{r.client}: {r.answer or 'no answer'} ({r.reason})"
                for r in replies
                if r.answer != Answer.RECONFIGURED
            )
            self.seen.alerts = [f"periodic reconfigure not accepted: {bad}"]
            log.warning("periodic reconfigure not accepted", extra={"replies": bad})

    async def enforce_replicas(self) -> None:
        """Every other server follows the master (a returning old master carries an older
        token and becomes a replica). One carrying a newer token is left alone: a round that
        the clients have not confirmed yet promoted it, and demoting it could leave that
        round's clients on a replica."""
        master, token = self.seen.master, self.seen.master_token
        if master is None or token is None:
            return
        for info in await self.infos():
            if info.address == master or not info.reachable:
                continue
            if info.role == "master" and info.token is not None and info.token > token:
                log.info(
                    "left a master of a newer, unconfirmed round alone",
                    extra={"server": str(info.address), "round": str(info.token)},
                )
                continue
            if info.role == "master" or info.master_of != master:
                await self._replicate(info.address, master)

    async def round(
        self, *, old: Address | None, check: bool, new: Address | None = None,
        planned: bool = False, catch_up_timeout: float = 30.0,
    ) -> Address:  # fmt: skip
        """One switch (seed 002's flow). ``check``: clients must confirm ``old`` does not
        answer from their host; ``new``: the server to promote (default: the most advanced
        replica); ``planned``: pause writes on ``old`` and wait for ``new`` to catch up.
        Returns the new master; raises :class:`FailoverError` when held back."""
        started = time.monotonic()
        token = self._next_token()
        body: dict[str, Any] = {
            "token": token.to_json(),
            "old": None if old is None else str(old),
            "check": check,
            "check_timeout": self.config.request_timeout,
        }
        log.info(
            "round started",
            extra={"round": str(token), "old": str(old), "check": check, "planned": planned},
        )
        replies = await self.broadcast("ping", body)
        self._learn(replies)
        self.metrics.confirming.set(sum(r.answer == Answer.PONG for r in replies))
        if not all(r.answer == Answer.PONG for r in replies):
            self._hold_back(token, Answer.PONG, replies)
            raise FailoverError(self.seen.alerts[0])
        replies = await self.broadcast("invalidate", body)
        self._learn(replies)
        if not all(r.answer == Answer.INVALIDATED for r in replies):
            self._hold_back(token, Answer.INVALIDATED, replies)
            raise FailoverError(self.seen.alerts[0])
        log.info("every client invalidated the master", extra={"round": str(token)})
        self.invalidated = token
        holding = asyncio.create_task(self._hold(token))
        try:
            return await self._finish(
                token, body, old=old, new=new, planned=planned,
                catch_up_timeout=catch_up_timeout, started=started,
            )  # fmt: skip
        finally:
            holding.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await holding

    async def _hold(self, token: Token) -> None:
        """While a round works between invalidate and reconfigure (a planned switch waits for
        its new master, a promotion for its clock fence), tell the waiting clients every check
        interval that it is alive: other servers take over a round that goes quiet. Each
        broadcast runs on its own, so one client slow to answer delays no other's hold."""
        sent: set[asyncio.Task[list[Reply]]] = set()
        try:
            while True:
                await asyncio.sleep(self.config.check_interval)
                task = asyncio.create_task(self.broadcast("hold", {"token": token.to_json()}))
                sent.add(task)
                task.add_done_callback(sent.discard)
        finally:
            for task in list(sent):
                task.cancel()

    async def _finish(
        self, token: Token, body: dict[str, Any], *, old: Address | None, new: Address | None,
        planned: bool, catch_up_timeout: float, started: float,
    ) -> Address:  # fmt: skip
        """A round after every client invalidated: promote, then reconfigure."""
        paused = False
        if planned and old is not None and new is not None:
            await self._catch_up(old, new, catch_up_timeout, token)
            paused = True
        infos = await self.infos()
        if new is None:
            chosen = choose_replica(infos, old)
            if chosen is None:
                empty = [str(i.address) for i in infos if i.reachable and i.holds_nothing]
                why = (
                    f"no replica holds the master's data ({', '.join(empty)}: empty, never synced)"
                    if empty
                    else "no replica answers"
                )
                alert = (
                    f"switch held back in round {token} at promote: {why}; the clients keep "
                    "an empty master file until a later round"
                )
                log.warning(alert, extra={"round": str(token)})
                self.metrics.held_back.set(1)
                self.metrics.rounds.labels("held_back").inc()
                self.seen.alerts = [alert]
                self.seen.last_round = {
                    "token": token.to_json(),
                    "outcome": "held back",
                    "step": "promote",
                    "at": time.time(),
                }
                raise FailoverError(alert)
            new = chosen.address
        try:
            r = self._r(new)
            await r.replicaof("NO", "ONE")
            # A planned switch whose server died while it waited left writes paused on its
            # old master; a round that names that master again lifts the pause.
            await r.execute_command("CLIENT", "UNPAUSE")  # type: ignore[no-untyped-call]
            await self._raise_token(new, token)
            if new != self.seen.master:
                # Naming the master it has been checking again (a round taken over) grants
                # nothing new: the fence is for a master that takes another's place.
                await self._clock_fence(new)
        except (RedisError, OSError) as exc:
            await self._drop(new)
            self.metrics.rounds.labels("failed").inc()
            raise FailoverError(
                f"round {token}: could not promote {new}: {logs.describe(exc)}; clients keep "
                "an empty master file until a later round"
            ) from None
        replies = await self.broadcast("reconfigure", {**body, "master": str(new)})
        self.invalidated = None
        highest = self._learn(replies)
        overtaken = highest is not None and highest > token
        if overtaken and not any(r.answer == Answer.RECONFIGURED for r in replies):
            # No client took it: a newer round reached them all in between (a racing server's,
            # or one that took this one over). Its master is theirs, not ours.
            self.metrics.rounds.labels("overtaken").inc()
            log.info(
                "round overtaken by a newer one",
                extra={"round": str(token), "newer": str(highest), "promoted": str(new)},
            )
            await self.discover()
            raise FailoverError(f"round {token} was overtaken by round {highest}: nothing switched")
        self.seen.master, self.seen.master_token = new, token
        self._failures = 0
        for info in infos:
            if info.address != new and info.reachable:
                await self._replicate(info.address, new)
        if paused and old is not None:
            with contextlib.suppress(RedisError, OSError):
                await self._r(old).execute_command("CLIENT", "UNPAUSE")  # type: ignore[no-untyped-call]
        took = time.monotonic() - started
        self.metrics.rounds.labels("switched").inc()
        self.metrics.held_back.set(0)
        self.seen.alerts = []
        self.seen.last_round = {
            "token": token.to_json(),
            "outcome": "switched",
            "old": None if old is None else str(old),
            "new": str(new),
            "seconds": round(took, 3),
            "replies": [r.to_json() for r in replies],
            "at": time.time(),
        }
        log.warning(
            "master switched",
            extra={"round": str(token), "old": str(old), "new": str(new), "seconds": f"{took:.3f}"},
        )
        self._next_periodic = time.monotonic() + self.config.reconfigure_interval
        return new

    async def _catch_up(self, old: Address, new: Address, timeout: float, token: Token) -> None:
        """Planned switch: stop writes on the old master (``CLIENT PAUSE WRITE``: a write that
        was already on its way waits, then fails once the old master is a replica), then wait
        until the new master's replication offset reaches the old master's."""
        r_old = self._r(old)
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
        with contextlib.suppress(RedisError, OSError):
            await r_old.execute_command("CLIENT", "UNPAUSE")  # type: ignore[no-untyped-call]
        raise FailoverError(
            f"round {token}: {new} did not catch up with {old} (offset {target}) in {timeout:g}s; "
            "nothing was promoted: run the switch again"
        )

    async def _clock_fence(self, new: Address) -> None:
        """Wait until ``new``'s clock is past the last ``TIME`` read on the old master plus
        one check interval and one request timeout (the longest the old master can have
        granted epochs after that read before a check found it gone), so epochs the new
        master grants (at least its clock) are above those granted before, even ones it never
        received. With clocks in step this never waits: a round starts ``retries`` checks
        later."""
        fence = self._last_time + self.config.check_interval + self.config.request_timeout
        if self._last_time == 0.0:
            # Never saw the old master answer (this server started after it was gone): there is
            # no reading to be above, and the new master's clock is trusted as it is.
            log.warning(
                "promoting without a clock fence: this server never read the old master's clock; "
                "keep the Redis hosts' clocks in step (NTP)",
                extra={"server": self.config.server_id, "new_master": str(new)},
            )
            return
        deadline = time.monotonic() + CLOCK_FENCE_LIMIT
        while True:
            now = await self.check(new)
            if now is not None and now > fence:
                return
            if time.monotonic() > deadline:
                raise FailoverError(
                    f"the clock of {new} stays behind the old master's by more than "
                    f"{CLOCK_FENCE_LIMIT:g} s: "
                    "fix the clocks (NTP) before switching"
                )
            await asyncio.sleep(0.01)

    def status(self) -> dict[str, Any]:
        return {
            "server": self.config.server_id,
            "master": None if self.seen.master is None else str(self.seen.master),
            "master_token": None
            if self.seen.master_token is None
            else self.seen.master_token.to_json(),
            "generation": self.generation,
            "failures": self._failures,
            "last_round": self.seen.last_round,
            "alerts": self.seen.alerts,
        }

    async def run(self, stop: asyncio.Event) -> None:
        """Check, switch and reconfigure until ``stop`` is set (the first check discovers the
        current master)."""
        while not stop.is_set():
            try:
                await self.tick()
            except (RedisError, OSError, httpx.HTTPError, ConfigError) as exc:
                log.warning("check failed", extra={"error": logs.describe(exc)})
            except Exception as exc:
                # A bug must not stop the role that keeps the clients' files current: say what
                # failed (one line) and check again.
                log.error("check failed unexpectedly", extra={"error": logs.describe(exc)})
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.config.check_interval)


def build_app(server: ConfigurationServer) -> Starlette:
    """``GET /v1/status`` (JSON) and ``GET /metrics`` (Prometheus)."""

    async def status(request: Request) -> Response:
        return JSONResponse(server.status())

    async def metrics(request: Request) -> Response:
        return Response(generate_latest(server.metrics.registry), media_type="text/plain")

    return Starlette(
        routes=[
            Route("/v1/status", status, methods=["GET"]),
            Route("/metrics", metrics, methods=["GET"]),
        ]
    )


async def run_server(config: ServerConfig, stop: asyncio.Event) -> None:
    """Run the server role (and its status API when ``listen`` is set) until ``stop``."""
    server = ConfigurationServer(config)
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
        info = await server.info(new)
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


__all__ = [
    "TOKEN_KEY",
    "ConfigurationServer",
    "Metrics",
    "build_app",
    "run_server",
    "switch",
]
