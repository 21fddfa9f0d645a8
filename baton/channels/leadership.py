"""Who runs a channel's stream: this node leads it (holds the lease ``channels/<channel>`` in a
:class:`LeaseKeeper`, so all its channel leases renew in one store round trip, and runs the
upstream) or follows its leader (runs a relay), and moves to a new epoch when the lease moves.

* Followers read every channel lease in one store call every ``check_interval``; a lease gone
  or at another epoch makes them take the lease or follow the new holder, and give every
  subscriber the new epoch with fresh initial data (seed 000's scenario 1). A check that fails
  is postponed to the next interval: nothing changes on a failed read (scenario 4).
* A stream never goes back to an epoch lower than one it has seen, and a lease this node's
  previous incarnation held is left to expire.
* A leader that loses its lease stops its upstream first, then decides again at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
from collections.abc import Callable, Coroutine, Mapping
from typing import Any

from baton.clock import Clock
from baton.errors import ChannelFinished, ChannelUnavailable, LossReason, StoreError
from baton.lease.keeper import LeaseKeeper
from baton.lease.role import Role
from baton.logs import describe
from baton.store import Lease, Store

from .config import ChannelTimings
from .forward import Forwarder
from .handler import Channel, Context
from .metrics import ChannelMetrics
from .relay import Relays
from .stream import LEASES, Registry, Sink, Stream, Sub, Tasks, lease_name
from .upstream import Upstreams

log = logging.getLogger("baton.channels")

#: Give the subscribers of ``stream`` (of an older epoch) the current one.
Resubscribe = Callable[[Stream, list[tuple[Sink, Sub]]], Coroutine[Any, Any, None]]


class _Unread(enum.Enum):
    """The lease was not read yet: :meth:`Leadership.recheck` reads it."""

    UNREAD = enum.auto()


UNREAD = _Unread.UNREAD


class Leadership:
    """Leading and following this node's channels (see the module's docstring)."""

    def __init__(
        self,
        store: Store,
        node: str,
        token: str,
        registry: Registry,
        *,
        forwarder: Forwarder,
        timings: ChannelTimings,
        metrics: ChannelMetrics,
        clock: Clock,
        tasks: Tasks,
        settings: Callable[[Channel], Mapping[str, Any]],
        resubscribe: Resubscribe,
        listen_host: str | None,
    ) -> None:
        self.store = store
        self.node = node
        self.registry = registry
        self.timings = timings
        self.metrics = metrics
        self.clock = clock
        self.tasks = tasks
        self._settings = settings
        self._resubscribe = resubscribe
        self.keeper = LeaseKeeper(store, node, timings.lease, on_lost=self.on_lost, clock=clock)
        self.upstreams = Upstreams(
            registry,
            self.keeper,
            metrics,
            clock,
            tasks,
            watchdog=timings.watchdog,
            finish=self._upstream_finished,
            lost=self.lost,
        )
        self.relays = Relays(
            node,
            token,
            store,
            registry,
            forwarder=forwarder,
            metrics=metrics,
            timings=timings,
            clock=clock,
            tasks=tasks,
            listen_host=listen_host,
            recheck=self.recheck,
            finished=self.finish,
        )

    def loops(self) -> list[asyncio.Task[None]]:
        """Start the check loop and the upstreams' watchdog."""
        return [
            asyncio.create_task(self._check_loop(), name="channels-check"),
            asyncio.create_task(self.upstreams.watchdog(), name="channels-watchdog"),
        ]

    async def ensure(self, stream: Stream) -> None:
        """Make sure this node leads ``stream`` or follows its leader; leaves ``epoch`` 0
        when that cannot be decided now."""
        if stream.epoch and (stream.role == Role.LEADER or stream.task is not None):
            return
        await self.recheck(stream)

    async def recheck(self, stream: Stream, lease_now: Lease | _Unread | None = UNREAD) -> None:
        """Decide ``stream``'s leader again from its lease (``lease_now``: as just read;
        else read it), taking the lease when it is free and someone here subscribes."""
        async with stream.lock:
            if stream.finished or self.registry.stopping:
                return
            try:
                # Real seconds: these bound store calls, not a timer of the channels' logic.
                async with asyncio.timeout(self.timings.lease.request_timeout * 2):
                    if lease_now is UNREAD:
                        current = await self.store.get_lease(lease_name(stream.name))
                    else:
                        current = lease_now
                    if current is None and stream.subs:
                        await self.drop_lease(stream.name)
                        current = await self.keeper.add(lease_name(stream.name))
                        if current is None:
                            current = await self.store.get_lease(lease_name(stream.name))
            except (StoreError, TimeoutError) as exc:
                # Scenario 4: cannot check now; decide at the next interval.
                log.warning(
                    "channel lease check postponed",
                    extra={"channel": stream.name, "error": describe(exc)},
                )
                return
            if current is None:
                return  # free, but nobody here wants it (or reserved for another node)
            if current.epoch == stream.epoch and current.holder == (
                self.node if stream.role == Role.LEADER else stream.leader
            ):
                if stream.role == Role.FOLLOWER and (stream.task is None or stream.task.done()):
                    self._follow(stream, current)
                return
            if current.epoch < stream.max_epoch:
                return  # an older lease read late: never go back
            if current.holder == self.node and self.keeper.get(current.name) is None:
                return  # our previous incarnation's lease: wait for it to expire
            await self._change_epoch(stream, current)

    async def _change_epoch(self, stream: Stream, lease: Lease) -> None:
        """Move ``stream`` to ``lease``'s epoch: lead it or follow its holder, and give every
        subscriber here the new epoch with fresh initial data."""
        await self.halt(stream, "leadership moved")
        stream.new_epoch(lease.epoch, lease.holder)
        if lease.holder == self.node:
            self._lead(stream, lease)
        else:
            self._follow(stream, lease)
        log.info(
            "channel epoch",
            extra={"channel": stream.name, "epoch": lease.epoch, "leader": lease.holder},
        )
        waiting = [(s, sub) for s, sub in stream.subs.items() if sub.epoch != 0]
        if waiting:
            self.tasks.spawn(self._resubscribe(stream, waiting), f"resubscribe:{stream.name}")

    def _lead(self, stream: Stream, lease: Lease) -> None:
        stream.role = Role.LEADER
        stream.ctx = Context(
            self.node, stream.channel, lease.epoch, self.store, self._settings(stream.channel),
            clock=self.clock,
        )  # fmt: skip
        stream.task = self.upstreams.start(stream, stream.ctx)

    def _follow(self, stream: Stream, lease: Lease) -> None:
        stream.role = Role.FOLLOWER
        stream.ctx = None
        stream.task = asyncio.create_task(
            self.relays.run(stream, lease.holder, lease.epoch), name=f"relay:{stream.name}"
        )

    async def halt(self, stream: Stream, why: str, notify: bool = True) -> None:
        """Stop the upstream or relay of ``stream``; ``notify``: tell the relays that follow
        it (else call :meth:`notify_relays` once the lease is dealt with)."""
        task, stream.task = stream.task, None
        was_leader, stream.role = stream.role == Role.LEADER, Role.NONE
        stream.relay_up = False
        if stream.ctx is not None:
            stream.ctx.stopping.set()
        if was_leader:
            self.metrics.upstreams.dec()
        if task is not None and task is not asyncio.current_task():
            task.cancel()
            if was_leader:
                # The upstream must have stopped before the lease can be given up.
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
            else:
                # A relay only reads: no need to wait for its connection to close (real
                # seconds: this bounds a connection's close, not a timer of the logic).
                await asyncio.wait({task}, timeout=self.timings.forward_timeout)
        if was_leader and notify:
            self.notify_relays(stream, why)

    def notify_relays(self, stream: Stream, why: str) -> None:
        """Tell every node that relays ``stream`` from here that this epoch is over here."""
        for sink, sub in list(stream.subs.items()):
            if sub.relay:
                del stream.subs[sink]
                sink.send(stream.unsubscribed(ChannelUnavailable.code, why))

    async def drop_lease(self, name: str) -> None:
        if name in self.keeper.names():
            with contextlib.suppress(StoreError, TimeoutError):
                # Real seconds: this bounds a store call.
                async with asyncio.timeout(self.timings.lease.request_timeout):
                    await self.keeper.remove(name)

    async def finish(self, stream: Stream, reason: str) -> None:
        """Scenario 8: the channel's upstream ended cleanly. Tell every subscriber here (code
        4100), stop, and forget the stream; a leader releases the lease."""
        stream.finished = True
        text = stream.unsubscribed(ChannelFinished.code, reason)
        subs, stream.subs = stream.subs, {}
        for sink in subs:
            sink.send(text)
        await self.halt(stream, reason)
        await self.drop_lease(lease_name(stream.name))  # a follower holds none: a no-op
        self.registry.remove(stream)
        self.metrics.count(self.registry)

    async def _upstream_finished(self, stream: Stream) -> None:
        reason = f"channel {stream.name} finished at epoch {stream.epoch}, offset {stream.offset}"
        await self.finish(stream, reason)

    def on_lost(self, name: str, reason: LossReason) -> None:
        """The keeper lost a lease: stop leading its channel."""
        stream = self.registry.get(name.removeprefix(LEASES))
        if stream is not None and stream.role == Role.LEADER and not stream.finished:
            log.warning("channel leadership lost", extra={"channel": stream.name, "reason": reason})
            self.tasks.spawn(self.lost(stream), f"lost:{stream.name}")

    async def lost(self, stream: Stream) -> None:
        if stream.role != Role.LEADER:
            return
        await self.halt(stream, f"{self.node} lost the leadership of {stream.name}")
        stream.epoch = 0  # re-decided at once: someone else leads, or we take it again
        await self.drop_lease(lease_name(stream.name))
        await self.recheck(stream)

    async def _check_loop(self) -> None:
        """Scenarios 1 and 4: every interval, read every channel lease in one call and move
        the channels whose lease is gone or at another epoch; a failed read changes nothing."""
        while True:
            await self.clock.sleep(self.timings.check_interval)
            watched = [s for s in self.registry if s.role != Role.LEADER and s.subs]
            if not watched:
                continue
            try:
                # Real seconds: this bounds a store call, not a timer of the channels' logic.
                async with asyncio.timeout(self.timings.lease.request_timeout * 2):
                    held = {x.name: x for x in await self.store.list_leases(LEASES)}
            except (StoreError, TimeoutError) as exc:
                log.warning("channel check postponed", extra={"error": describe(exc)})
                continue
            for stream in watched:
                lease = held.get(lease_name(stream.name))
                if lease is None or lease.epoch != stream.epoch or not stream.relay_up:
                    self.tasks.spawn(self.recheck(stream, lease), f"recheck:{stream.name}")


__all__ = ["Leadership"]
