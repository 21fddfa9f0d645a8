"""``Client``: subscribe to channels at any node, reconnecting and recovering.

::

    async with Client(["http://10.0.0.5:7400", "http://10.0.0.6:7400"], token) as client:
        async for msg in client.subscribe("tick:clock"):
            print(msg.kind, msg.epoch, msg.offset, msg.data)

Messages are ``subscribed`` (initial data, or ``recovered`` with no data), ``pub``, ``gap``
(publications may be missing before this one: the upstream was restarted) and ``finished``
(the upstream ended; the iteration stops after it). When the connection drops, the client
connects to the next URL, subscribes again with ``since`` = the last epoch and offset it saw,
and so recovers what it missed when the channel's leader still has it in its history; else a
fresh ``subscribed`` with the new epoch's data comes. A refusal ends the iteration with
:class:`~baton.errors.ChannelRefused` or :class:`~baton.errors.BadChannel`; a connection closed
for bad input or a wrong token with :class:`~baton.errors.BadFrame`. Subscribes the leader
could not answer (code 4503) are repeated after a pause.

Publications are never delivered twice, or out of order, or from an epoch older than one
already seen: the client drops them.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Self

from baton.backoff import Backoff
from baton.errors import (
    BadFrame,
    ChannelError,
    ChannelFinished,
    ChannelUnavailable,
)

from .protocol import (
    CLOSE_BAD_FRAME,
    CLOSE_TOO_BIG,
    CLOSE_UNAUTHORIZED,
    UNSUB_CLIENT,
    Gap,
    NodeFrame,
    Pub,
    Since,
    Subscribe,
    Subscribed,
    Unsubscribe,
    Unsubscribed,
    dumps,
    parse_node_frame,
)

#: Codes after which reconnecting cannot help.
FATAL_CLOSE = {CLOSE_BAD_FRAME, CLOSE_UNAUTHORIZED, CLOSE_TOO_BIG}


@dataclass(frozen=True, slots=True)
class Message:
    """One thing a subscription received."""

    kind: str
    channel: str
    epoch: int
    offset: int
    data: Any = None
    recovered: bool = False
    reason: str | None = None
    ts: float | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "type": self.kind,
            "channel": self.channel,
            "epoch": self.epoch,
            "offset": self.offset,
        }
        if self.kind == "subscribed":
            out["recovered"] = self.recovered
        if self.kind in ("subscribed", "pub"):
            out["data"] = self.data
        if self.reason is not None:
            out["reason"] = self.reason
        return out


def ws_url(api: str) -> str:
    """``http://host:port`` (or ``ws://``) to the channel endpoint's ``ws://`` URL."""
    base = api.rstrip("/")
    if base.startswith("http://"):
        base = "ws://" + base.removeprefix("http://")
    elif base.startswith("https://"):
        base = "wss://" + base.removeprefix("https://")
    if not base.endswith("/v1/channels/ws"):
        base += "/v1/channels/ws"
    return base


class Subscription:
    """The messages of one channel (an async iterator)."""

    def __init__(self, client: Client, channel: str) -> None:
        self.client = client
        self.channel = channel
        self.epoch = 0
        self.offset = 0
        self.queue: asyncio.Queue[Message | ChannelError] = asyncio.Queue()
        self.done = False

    def request(self) -> str:
        since = Since(epoch=self.epoch, offset=self.offset) if self.epoch else None
        return dumps(Subscribe(channel=self.channel, since=since))

    def _frame(self, frame: NodeFrame) -> None:
        if isinstance(frame, Subscribed):
            if frame.epoch < self.epoch:
                return
            self.epoch, self.offset = frame.epoch, frame.offset
            self.queue.put_nowait(
                Message("subscribed", self.channel, frame.epoch, frame.offset, frame.data,
                        frame.recovered)
            )  # fmt: skip
        elif isinstance(frame, Pub | Gap):
            # Drop what is older than what we have: another epoch's, or a repeat.
            if frame.epoch != self.epoch or frame.offset <= self.offset:
                return
            self.offset = frame.offset
            if isinstance(frame, Pub):
                message = Message("pub", self.channel, frame.epoch, frame.offset, frame.data,
                                  ts=frame.ts)  # fmt: skip
            else:
                message = Message("gap", self.channel, frame.epoch, frame.offset,
                                  reason=frame.reason)  # fmt: skip
            self.queue.put_nowait(message)
        elif isinstance(frame, Unsubscribed):
            if frame.code == UNSUB_CLIENT:
                return  # unsubscribed as asked
            ended = ChannelError.from_code(frame.code, frame.reason)
            if isinstance(ended, ChannelFinished):
                self.queue.put_nowait(
                    Message("finished", self.channel, self.epoch, self.offset, reason=frame.reason)
                )
                self.done = True
            elif isinstance(ended, ChannelUnavailable):
                self.client._retry(self)
            else:
                self._fail(ended)

    def _fail(self, exc: ChannelError) -> None:
        self.done = True
        self.queue.put_nowait(exc)

    def __aiter__(self) -> AsyncIterator[Message]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[Message]:
        await self.client._start(self)
        try:
            while True:
                item = await self.queue.get()
                if isinstance(item, ChannelError):
                    raise item
                yield item
                if item.kind == "finished":
                    return
        finally:
            await self.client._forget(self)


class Client:
    """An async channel client over one WebSocket at a time (see the module's docstring).
    ``urls``: node API URLs (``http://host:port``), tried in turn; ``token``: the cluster token
    or a per-user token a handler accepts."""

    def __init__(
        self,
        urls: str | Sequence[str],
        token: str,
        *,
        reconnect_delay: float = 0.1,
        max_delay: float = 2.0,
        open_timeout: float = 5.0,
        ping_interval: float = 5.0,
    ) -> None:
        self.urls = [ws_url(u) for u in ([urls] if isinstance(urls, str) else urls)]
        if not self.urls:
            raise ValueError("give at least one node URL")
        self._token = token
        self.reconnect_delay = reconnect_delay
        self.max_delay = max_delay
        self.open_timeout = open_timeout
        self.ping_interval = ping_interval
        self.subs: dict[str, Subscription] = {}
        self._ws: Any = None
        self._task: asyncio.Task[None] | None = None
        self._connected = asyncio.Event()
        self._retries: set[asyncio.Future[None]] = set()
        self._closed = False
        self._rotation = itertools.cycle(range(len(self.urls)))
        #: Connections made (the first and every reconnection).
        self.connections = 0
        self.url: str | None = None

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    def subscribe(self, channel: str) -> Subscription:
        """A subscription to ``channel``; iterate it to subscribe and receive."""
        return Subscription(self, channel)

    async def close(self) -> None:
        self._closed = True
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        if self._ws is not None:
            with contextlib.suppress(Exception):
                await self._ws.close()

    async def _start(self, sub: Subscription) -> None:
        self.subs[sub.channel] = sub
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="channels-client")
        elif self._connected.is_set():
            await self._send(sub.request())

    async def _forget(self, sub: Subscription) -> None:
        if self.subs.get(sub.channel) is sub:
            del self.subs[sub.channel]
            if not sub.done and self._connected.is_set():
                with contextlib.suppress(Exception):
                    await self._send(dumps(Unsubscribe(channel=sub.channel)))

    async def _send(self, text: str) -> None:
        if self._ws is not None:
            await self._ws.send(text)

    def _retry(self, sub: Subscription) -> None:
        async def later() -> None:
            await asyncio.sleep(self.reconnect_delay * 5)
            if self.subs.get(sub.channel) is sub and self._connected.is_set():
                with contextlib.suppress(Exception):
                    await self._send(sub.request())

        task = asyncio.ensure_future(later())
        self._retries.add(task)
        task.add_done_callback(self._retries.discard)

    async def _run(self) -> None:
        from websockets.asyncio.client import connect
        from websockets.exceptions import ConnectionClosed, WebSocketException

        first = max(self.reconnect_delay, 0.001)  # a zero delay would spin on a dead node
        backoff = Backoff(first, max(first, self.max_delay))
        while not self._closed:
            url = self.urls[next(self._rotation)]
            try:
                async with connect(
                    url,
                    additional_headers={"authorization": f"Bearer {self._token}"},
                    open_timeout=self.open_timeout,
                    # A node that hangs (paused, cut off) is noticed within two pings and
                    # left at once for the next URL.
                    ping_interval=self.ping_interval,
                    ping_timeout=self.ping_interval,
                    close_timeout=1.0,
                    max_size=16 * 1024 * 1024,
                ) as ws:
                    self._ws, self.url = ws, url
                    self.connections += 1
                    self._connected.set()
                    for sub in list(self.subs.values()):
                        await ws.send(sub.request())
                    backoff.reset()
                    async for message in ws:
                        text = message if isinstance(message, str) else message.decode()
                        for line in text.split("\n"):
                            frame = parse_node_frame(line) if line else None
                            target = self.subs.get(frame.channel) if frame is not None else None
                            if frame is not None and target is not None:
                                target._frame(frame)
            except ConnectionClosed as exc:
                code = exc.rcvd.code if exc.rcvd is not None else None
                if code in FATAL_CLOSE:
                    reason = exc.rcvd.reason if exc.rcvd is not None else ""
                    for sub in list(self.subs.values()):
                        sub._fail(BadFrame(reason or f"closed with code {code}", code))
                    return
            except (OSError, TimeoutError, WebSocketException):
                pass
            finally:
                self._connected.clear()
                self._ws = None
            if self._closed:
                return
            await backoff.sleep()


__all__ = ["Client", "Message", "Subscription", "ws_url"]
