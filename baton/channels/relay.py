"""A follower's relay: one WebSocket to the channel leader's endpoint (with the cluster token),
whose publications this node keeps in its history and passes on to its own subscribers.

The relay follows one epoch. A frame of another epoch ends it (the fence: never pass on
another epoch's frames); so do the leader's ``unsubscribed`` and a lost connection, after
which the lease is looked at at once rather than at the next check interval. A relay that
reconnects with ``since`` recovers from the leader's history; when it cannot, its
subscribers get a ``gap``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any

from baton.backoff import Backoff
from baton.clock import Clock
from baton.errors import ChannelError, ChannelFinished, StoreError
from baton.logs import describe
from baton.store import Lease, Store
from baton.transport import local_address

from .config import ChannelTimings
from .forward import Forwarder
from .metrics import ChannelMetrics
from .protocol import Gap, Pub, Since, Subscribe, Subscribed, Unsubscribed, dumps, parse_node_frame
from .stream import Registry, Stream, Tasks, lease_name

log = logging.getLogger("baton.channels")

#: Look at ``stream``'s lease now, given what the store holds (None: no lease).
Recheck = Callable[[Stream, Lease | None], Coroutine[Any, Any, None]]
#: The leader says ``stream`` finished (the reason).
Finished = Callable[[Stream, str], Coroutine[Any, Any, None]]


class Relays:
    """The relays this node runs as a follower of channels led elsewhere."""

    def __init__(
        self,
        node: str,
        token: str,
        store: Store,
        registry: Registry,
        *,
        forwarder: Forwarder,
        metrics: ChannelMetrics,
        timings: ChannelTimings,
        clock: Clock,
        tasks: Tasks,
        listen_host: str | None,
        recheck: Recheck,
        finished: Finished,
    ) -> None:
        self.node = node
        self._token = token
        self.store = store
        self.registry = registry
        self.forwarder = forwarder
        self.metrics = metrics
        self.timings = timings
        self.clock = clock
        self.tasks = tasks
        self._local = local_address(listen_host)
        self._recheck = recheck
        self._finished = finished

    async def run(self, stream: Stream, leader: str, epoch: int) -> None:
        """Follow ``leader``'s stream at ``epoch`` until it ends; then let the check decide."""
        from websockets.asyncio.client import connect
        from websockets.exceptions import WebSocketException

        backoff = Backoff(0.05, max(0.05, self.timings.check_interval))
        while stream.epoch == epoch and not self.registry.stopping:
            try:
                address = await self.forwarder.address(leader)
                async with connect(
                    f"ws://{address}/v1/channels/ws",
                    additional_headers={"authorization": f"Bearer {self._token}"},
                    open_timeout=self.timings.forward_timeout,
                    # Leaving a leader that hangs (paused, cut off) must not wait for its
                    # closing handshake: 10 s by default, during which this node would
                    # neither lead nor follow the channel's new epoch.
                    close_timeout=self.timings.forward_timeout,
                    max_size=16 * 1024 * 1024,
                    local_addr=(self._local, 0) if self._local else None,
                ) as ws:
                    # Once the relay has started, even at offset 0, a reconnect asks for what
                    # it missed: starting over would leave a hole in this node's history.
                    since = Since(epoch=epoch, offset=stream.offset) if stream.relayed else None
                    request = Subscribe(
                        channel=stream.name, relay=epoch, node=self.node, since=since
                    )
                    await ws.send(dumps(request))
                    async for message in ws:
                        text = message if isinstance(message, str) else message.decode()
                        for line in text.split("\n"):
                            if line and self._relayed(stream, epoch, line):
                                stream.relay_up = False
                                return
                        backoff.reset()
            except (OSError, TimeoutError, WebSocketException, ChannelError, StoreError) as exc:
                log.info(
                    "relay to channel leader interrupted",
                    extra={"channel": stream.name, "leader": leader, "error": describe(exc)},
                )
                self.forwarder.forget(leader)
                stream.relay_news(
                    str(exc)
                    if isinstance(exc, ChannelError)
                    else f"leader {leader} of {stream.name} did not answer this node's relay"
                    f" ({describe(exc)}): subscribe again"
                )
            stream.relay_up = False
            if stream.epoch != epoch:
                return
            # The leader may be gone: look at the lease now rather than at the next interval.
            delay = backoff.next()
            self.tasks.spawn(self.check_after(stream, epoch, delay), f"check:{stream.name}")
            await self.clock.sleep(delay)

    async def check_after(self, stream: Stream, epoch: int, delay: float) -> None:
        """After ``delay``, if ``stream`` is still at ``epoch``, look at its lease."""
        await self.clock.sleep(delay)
        if stream.epoch == epoch:
            try:
                # Real seconds: this bounds a store call, not a timer of the hub's logic.
                async with asyncio.timeout(self.timings.lease.request_timeout * 2):
                    lease = await self.store.get_lease(lease_name(stream.name))
            except (StoreError, TimeoutError):
                return  # scenario 4: decided at the next check
            if lease is None or lease.epoch != epoch:
                await self._recheck(stream, lease)

    def _relayed(self, stream: Stream, epoch: int, raw: str) -> bool:
        """One frame from the leader; True when the relay must end."""
        frame = parse_node_frame(raw)
        if frame is None:
            return False  # a newer leader's frame this node does not know
        if getattr(frame, "epoch", epoch) != epoch or stream.epoch != epoch:
            return True  # the fence: never pass on another epoch's frames
        if isinstance(frame, Subscribed):
            stream.relay_up = True
            if not frame.recovered and frame.offset > stream.offset and stream.relayed:
                gap = Gap(
                    channel=stream.name,
                    epoch=epoch,
                    offset=frame.offset,
                    reason="this node's relay fell behind the leader's history",
                )
                stream.deliver(gap, dumps(gap))
            stream.offset = max(stream.offset, frame.offset)
            stream.relay_news(None)
            return False
        if isinstance(frame, Pub | Gap):
            if frame.offset <= stream.offset:
                return False
            stream.offset = frame.offset
            # The leader's own text goes on: what it sent is what every subscriber gets.
            stream.deliver(frame, raw)
            if isinstance(frame, Pub) and frame.ts is not None:
                self.metrics.fanout.observe(max(0.0, self.clock.time() - frame.ts))
            return False
        if isinstance(frame, Unsubscribed):
            ended = ChannelError.from_code(frame.code, frame.reason)
            if isinstance(ended, ChannelFinished):
                self.tasks.spawn(self._finished(stream, frame.reason), "finished")
            else:
                self.tasks.spawn(self.check_after(stream, epoch, 0), f"check:{stream.name}")
            return True
        return False


__all__ = ["Relays"]
