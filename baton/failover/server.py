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
from typing import Any

import httpx
from redis.exceptions import RedisError

from baton import logs
from baton.errors import ConfigError, FailoverError
from baton.failover.config import ServerConfig
from baton.failover.decide import (
    Answer,
    RoundOutlook,
    Token,
    believed_master,
    choose_replica,
    first_master,
    round_outlook,
)
from baton.failover.messages import Clients, Reply
from baton.failover.redis_io import TOKEN_KEY, RedisServers
from baton.failover.status import Metrics, Observed, build_app
from baton.store.master_file import Address

log = logging.getLogger("baton.failover.server")

#: Seconds a promotion waits for the new master's clock to pass the old master's: a skew past
#: this needs the clocks fixed, not a longer wait.
CLOCK_FENCE_LIMIT = 30.0


class ConfigurationServer:
    """One configuration server. :meth:`run` is the loop; :meth:`round` one switch. It reaches
    the Redis servers through :attr:`redis` and the clients through :attr:`clients`."""

    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self.metrics = Metrics()
        self.generation = 0
        self.seen = Observed()
        self.redis = RedisServers(
            config.redis_servers, config.request_timeout, config.redis_password
        )
        self.clients = Clients(config.clients, config.request_timeout, config.token)
        self._failures = 0
        self._last_time: float = 0.0
        """The master's clock (``TIME``, seconds) at its last successful check."""
        self._next_periodic = 0.0
        self._next_round = 0.0
        self.invalidated: Token | None = None
        """The round in which every client invalidated, until its reconfigure was sent."""

    async def close(self) -> None:
        await self.clients.close()
        await self.redis.close()

    async def check(self, address: Address) -> float | None:
        """The server's clock if it answers, else None."""
        return await self.redis.clock(address)

    # -- rounds -------------------------------------------------------------------------------

    def _learn(self, replies: list[Reply]) -> Token | None:
        """The highest token any reply reports; raises our generation above it."""
        highest = max((r.highest for r in replies if r.highest is not None), default=None)
        if highest is not None:
            self.generation = max(self.generation, highest.generation)
        return highest

    def _next_token(self) -> Token:
        self.generation += 1
        return Token(self.generation, self.config.server_id)

    def _hold_back(self, token: Token, step: str, replies: list[Reply]) -> FailoverError:
        """A round held back at ``step`` because not every client answered it."""
        bad = [r for r in replies if r.answer != step]
        what = "; ".join(f"{r.client}: {r.answer or 'no answer'} ({r.reason})" for r in bad)
        self.metrics.confirming.set(len(replies) - len(bad))
        return self._held_back(token, step, what, replies)

    def _held_back(
        self, token: Token, step: str, why: str, replies: list[Reply] | None = None
    ) -> FailoverError:
        """Log, count and show a round held back at ``step``; the error to raise."""
        alert = f"switch held back in round {token} at {step}: {why}"
        log.warning(alert, extra={"round": str(token)})
        self.metrics.held_back.set(1)
        self.metrics.rounds.labels("held_back").inc()
        self.seen.alerts = [alert]
        self.seen.last_round = {
            "token": token.to_json(),
            "outcome": "held back",
            "step": step,
            **({} if replies is None else {"replies": [r.to_json() for r in replies]}),
            "at": time.time(),
        }
        return FailoverError(alert)

    # -- discovery ----------------------------------------------------------------------------

    async def discover(self) -> None:
        """Take the current master from the clients: the master of the newest round they
        confirmed (a token on a Redis server is never enough: a round that lost a race, or a
        master that came back with its data, carries one no client accepted). Only when no
        client confirmed a round yet (a first start) does it come from the servers and the
        files. Learns the highest round any client or server has seen."""
        reports = await self.clients.reports()
        for r in reports:
            for t in (r.state.highest, r.state.confirmed):
                if t is not None:
                    self.generation = max(self.generation, t.generation)
        infos = await self.redis.infos()
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
        reports = await self.clients.reports()
        if not reports:
            return  # no client answers: nothing can confirm a round now
        if believed_master(reports) is not None:
            await self.discover()
            return
        token = self._next_token()
        try:
            await self.redis.raise_token(master, token)
            self.seen.master_token = await self.redis.token(master)
        except (RedisError, OSError) as exc:
            log.warning("could not mark the master", extra={"error": logs.describe(exc)})

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
        replies = await self.clients.broadcast(
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
        for info in await self.redis.infos():
            if info.address == master or not info.reachable:
                continue
            if info.role == "master" and info.token is not None and info.token > token:
                log.info(
                    "left a master of a newer, unconfirmed round alone",
                    extra={"server": str(info.address), "round": str(info.token)},
                )
                continue
            if info.role == "master" or info.master_of != master:
                await self.redis.replicate(info.address, master)

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
        replies = await self.clients.broadcast("ping", body)
        self._learn(replies)
        self.metrics.confirming.set(sum(r.answer == Answer.PONG for r in replies))
        if not all(r.answer == Answer.PONG for r in replies):
            raise self._hold_back(token, Answer.PONG, replies)
        replies = await self.clients.broadcast("invalidate", body)
        self._learn(replies)
        if not all(r.answer == Answer.INVALIDATED for r in replies):
            raise self._hold_back(token, Answer.INVALIDATED, replies)
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
                task = asyncio.create_task(
                    self.clients.broadcast("hold", {"token": token.to_json()})
                )
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
            await self.redis.catch_up(old, new, catch_up_timeout, token)
            paused = True
        infos = await self.redis.infos()
        if new is None:
            chosen = choose_replica(infos, old)
            if chosen is None:
                empty = [str(i.address) for i in infos if i.reachable and i.holds_nothing]
                why = (
                    f"no replica holds the master's data ({', '.join(empty)}: empty, never synced)"
                    if empty
                    else "no replica answers"
                )
                raise self._held_back(
                    token,
                    "promote",
                    f"{why}; the clients keep an empty master file until a later round",
                )
            new = chosen.address
        try:
            await self.redis.promote(new, token)
            if new != self.seen.master:
                # Naming the master it has been checking again (a round taken over) grants
                # nothing new: the fence is for a master that takes another's place.
                await self._clock_fence(new)
        except (RedisError, OSError) as exc:
            await self.redis.drop(new)
            self.metrics.rounds.labels("failed").inc()
            raise FailoverError(
                f"round {token}: could not promote {new}: {logs.describe(exc)}; clients keep "
                "an empty master file until a later round"
            ) from None
        replies = await self.clients.broadcast("reconfigure", {**body, "master": str(new)})
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
                await self.redis.replicate(info.address, new)
        if paused and old is not None:
            await self.redis.unpause(old)
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
        await self.redis.wait_for_clock(new, fence, CLOCK_FENCE_LIMIT)

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


__all__ = [
    "CLOCK_FENCE_LIMIT",
    "TOKEN_KEY",
    "ConfigurationServer",
    "Metrics",
    "build_app",
]
