"""A channel leader's upstream: runs the handler's stream, publishes under the lease, restarts
it when it fails, and a watchdog that stops it once the lease is past its renew deadline.

* Every publication is made only while the lease is held inside its renew deadline at the
  stream's epoch (the keeper's view); otherwise the upstream stops, and nothing is sent.
* An upstream that raises is restarted at once, with a growing pause (up to
  :data:`MAX_RESTART_PAUSE`) while it keeps failing without publishing, and subscribers get a
  ``gap`` (seed 000's scenario 7); one that ends cleanly finishes the channel (scenario 8).
* The watchdog looks every ``watchdog`` seconds, so an upstream stops within a fraction of the
  stop margin after its lease is no longer safe, before the store can give the lease to anyone
  else (scenario 3); the keeper alone would only notice at its next renewal.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any

from baton.clock import Clock
from baton.lease.keeper import LeaseKeeper
from baton.lease.role import Role
from baton.logs import describe

from .handler import Context
from .metrics import ChannelMetrics
from .protocol import Gap, Pub, Publication, dumps
from .stream import Registry, Stream, Tasks, lease_name

log = logging.getLogger("baton.channels")

#: The longest pause between restarts of an upstream that keeps failing at once.
MAX_RESTART_PAUSE = 2.0

#: What is done with a stream: its upstream ended cleanly, or its leadership was lost.
Action = Callable[[Stream], Coroutine[Any, Any, None]]


class Upstreams:
    """The upstreams this node runs as channel leader."""

    def __init__(
        self,
        registry: Registry,
        keeper: LeaseKeeper,
        metrics: ChannelMetrics,
        clock: Clock,
        tasks: Tasks,
        *,
        watchdog: float,
        finish: Action,
        lost: Action,
    ) -> None:
        self.registry = registry
        self.keeper = keeper
        self.metrics = metrics
        self.clock = clock
        self.tasks = tasks
        self.interval = watchdog
        self._finish = finish
        self._lost = lost
        #: Set when this node starts leading a channel (wakes the watchdog).
        self.leading = asyncio.Event()

    def start(self, stream: Stream, ctx: Context) -> asyncio.Task[None]:
        """Run ``stream``'s upstream at ``ctx.epoch`` (until ``ctx.stopping``)."""
        self.leading.set()
        self.metrics.upstreams.inc()
        return asyncio.create_task(self._run(stream, ctx), name=f"upstream:{stream.name}")

    async def _run(self, stream: Stream, ctx: Context) -> None:
        pause = 0.0
        while not ctx.stopping.is_set():
            published = False
            try:
                async for data in stream.handler.run(ctx, stream.channel):
                    pub = Pub(
                        channel=stream.name,
                        epoch=ctx.epoch,
                        offset=stream.offset + 1,
                        data=data,
                        ts=self.clock.time(),
                    )
                    if not self._emit(stream, ctx, pub):
                        return
                    published = True
                    self.metrics.publications.inc()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if ctx.stopping.is_set():
                    return
                self.metrics.restarts.inc()
                log.warning(
                    "channel upstream failed: restarting",
                    extra={"channel": stream.name, "epoch": ctx.epoch, "error": describe(exc)},
                )
                reason = f"upstream failed and was restarted ({describe(exc)[:200]})"
                gap = Gap(
                    channel=stream.name, epoch=ctx.epoch, offset=stream.offset + 1, reason=reason
                )
                if not self._emit(stream, ctx, gap):
                    return
                pause = 0.0 if published else min(MAX_RESTART_PAUSE, max(0.05, pause * 2))
                await self.clock.sleep(pause)
                continue
            if not ctx.stopping.is_set():
                self.tasks.spawn(self._finish(stream), f"finish:{stream.name}")
            return

    def _emit(self, stream: Stream, ctx: Context, frame: Publication) -> bool:
        """Publish one frame of the leader's stream; False (and nothing sent) when the lease
        is no longer held inside its deadline at the stream's epoch."""
        lease = self.keeper.get(lease_name(stream.name))
        if lease is None or lease.epoch != ctx.epoch or stream.epoch != ctx.epoch:
            ctx.stopping.set()
            return False
        stream.offset = frame.offset
        stream.deliver(frame, dumps(frame))
        if isinstance(frame, Pub) and frame.ts is not None:
            self.metrics.fanout.observe(max(0.0, self.clock.time() - frame.ts))
        return True

    async def watchdog(self) -> None:
        """Stop every upstream whose lease is past its renew deadline."""
        while True:
            # An idle node (leading no channel) does not wake ten times a second for nothing.
            self.leading.clear()
            if not any(s.role == Role.LEADER for s in self.registry):
                await self.leading.wait()
            await self.clock.sleep(self.interval)
            for stream in self.registry:
                ctx = stream.ctx
                if (
                    stream.role == Role.LEADER
                    and self.keeper.get(lease_name(stream.name)) is None
                    and ctx is not None
                    and not ctx.stopping.is_set()
                ):
                    ctx.stopping.set()
                    self.tasks.spawn(self._lost(stream), f"lost:{stream.name}")


__all__ = ["MAX_RESTART_PAUSE", "Upstreams"]
