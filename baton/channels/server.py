"""The node's end of a channel WebSocket (``/v1/channels/ws``): authentication, the frame
reader, a bounded outgoing queue per connection, and the mapping of errors to closing codes
(see :mod:`baton.channels.protocol`)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Coroutine
from typing import Any

from starlette.websockets import WebSocket, WebSocketDisconnect, WebSocketState

from baton.errors import BadFrame, ChannelError
from baton.logs import describe

from .direct import FrameCache, writer_of
from .handler import User
from .hub import ChannelHub
from .protocol import (
    CLOSE_UNAUTHORIZED,
    UNSUB_CLIENT,
    UNSUB_TOO_SLOW,
    Auth,
    Publish,
    Refused,
    Subscribe,
    Unsubscribe,
    Unsubscribed,
    dumps,
    parse_frame,
)

log = logging.getLogger("baton.channels")

#: A WebSocket close reason is at most 123 bytes.
REASON_BYTES = 123
#: At most this many queued frames go out in one message (one per line).
BATCH = 64

#: A publication's frame, built once for all the subscribers of this process's fan-out.
FRAMES = FrameCache()


def short(reason: str) -> str:
    """``reason`` on one line, cut to what a close frame can carry."""
    line = " ".join(reason.split())
    data = line.encode()
    if len(data) <= REASON_BYTES:
        return line
    return data[: REASON_BYTES - 3].decode(errors="ignore") + "..."


class Connection:
    """One WebSocket: the hub's :class:`~baton.channels.stream.Sink`."""

    def __init__(self, ws: WebSocket, hub: ChannelHub) -> None:
        self.ws = ws
        self.hub = hub
        #: The server's direct write of a prebuilt frame, when it offers one.
        self.direct = writer_of(ws.scope)
        self.peer: str | None = None
        self.queue: asyncio.Queue[tuple[str, float | None]] = asyncio.Queue(hub.config.queue)
        self.closing: tuple[int, str] | None = None
        self.wake = asyncio.Event()
        #: A send that had to wait for the socket; frames queue behind it meanwhile.
        self.inflight: asyncio.Future[None] | None = None
        #: The writer is sending queued frames (a frame sent now would overtake them).
        self.flushing = False
        #: A send failed: the connection is over.
        self.broken = False
        #: Set once the close frame went out, or the connection ended.
        self.ended = asyncio.Event()

    def send(self, text: str, ts: float | None = None) -> None:
        if self.closing is not None or self.broken:
            return
        if self.queue.empty() and not self.flushing and self.inflight is None:
            # The fan-out's fast path: nothing is waiting for this connection, so the frame
            # goes to the socket now, in the caller's loop, without waking a task per
            # subscriber. It only suspends when the socket's write buffer is full (the
            # subscriber is behind): then it finishes in a task and what comes next waits in
            # the bounded queue behind it. Where the server allows, the frame's bytes, built
            # once per publication, go to the socket directly.
            if self.direct is not None and self.direct(FRAMES.frame(text)):
                return
            try:
                self.inflight = start_now(self.ws.send_text(text))
            except Exception:
                self._broke()
                return
            if self.inflight is not None:
                self.inflight.add_done_callback(self._sent)
            return
        try:
            self.queue.put_nowait((text, ts))
        except asyncio.QueueFull:
            # Bounded on purpose: a client that cannot keep up is closed, and recovers from
            # the history with ``since`` when it comes back.
            self.close(
                UNSUB_TOO_SLOW,
                f"too slow: more than {self.hub.config.queue} frames queued; "
                "reconnect and subscribe with since",
            )
            return
        self.wake.set()

    def _sent(self, task: asyncio.Future[None]) -> None:
        """A send that had to wait for the socket is done: the queue's turn."""
        self.inflight = None
        if task.cancelled() or task.exception() is not None:
            self._broke()
        self.wake.set()

    def _broke(self) -> None:
        """The socket failed under a send: end the writer (the reader then sees the end)."""
        self.broken = True
        self.wake.set()

    def close(self, code: int, reason: str) -> None:
        if self.closing is None:
            self.closing = (code, short(reason))
            self.wake.set()

    async def wait_closed(self) -> None:
        await self.ended.wait()

    async def _flush(self) -> None:
        """Send what is queued: one frame per message while the client keeps up, up to
        :data:`BATCH` per message (one per line) when it falls behind, which saves the
        per-message cost where it matters."""
        metric = self.hub.metrics.delivery
        while not self.queue.empty():
            batch: list[str] = []
            stamps: list[float] = []
            while len(batch) < BATCH and not self.queue.empty():
                text, ts = self.queue.get_nowait()
                batch.append(text)
                if ts is not None:
                    stamps.append(ts)
            await self.ws.send_text("\n".join(batch))
            now = self.hub.clock.time()
            for ts in stamps:
                metric.observe(max(0.0, now - ts))

    async def writer(self) -> None:
        while not self.broken:
            if self.inflight is not None:
                # Frames queued behind a send still waiting for the socket go after it.
                await asyncio.wait([self.inflight])
                continue
            if self.closing is not None:
                # Frames queued before the close go first (an ``unsubscribed`` says why).
                await self._flush()
                code, reason = self.closing
                try:
                    await self.ws.close(code, reason)
                finally:
                    self.ended.set()
                return
            if self.queue.empty():
                self.wake.clear()
                await self.wake.wait()
                continue
            self.flushing = True
            try:
                await self._flush()
            finally:
                self.flushing = False


def start_now(coro: Coroutine[Any, Any, None]) -> asyncio.Future[None] | None:
    """Run ``coro`` now, up to its first suspension (what an eager task does from Python
    3.12 on): None when it finished without suspending, else a task that finishes it. An
    exception raised before the first suspension is raised here."""
    try:
        waiting = coro.send(None)
    except StopIteration:
        return None
    return asyncio.ensure_future(_resume(coro, waiting))


async def _resume(coro: Coroutine[Any, Any, None], waiting: Any) -> None:
    """Drive ``coro`` on, as a task would, from the future it suspended on."""
    while True:
        try:
            if waiting is None:
                await asyncio.sleep(0)  # a bare yield: give the loop one turn
            else:
                # What a task's step does with a future its coroutine yields: take the
                # "blocking" mark off (awaiting a future that carries it is refused), then
                # wait for it here on the coroutine's behalf.
                waiting._asyncio_future_blocking = False
                await waiting
        except BaseException as exc:
            try:
                waiting = coro.throw(exc)
            except StopIteration:
                return
        else:
            try:
                waiting = coro.send(None)
            except StopIteration:
                return


async def serve(ws: WebSocket, hub: ChannelHub) -> None:
    """Serve one WebSocket until it closes."""
    await ws.accept()
    conn = Connection(ws, hub)
    hub.attach(conn)
    writer = asyncio.create_task(conn.writer(), name="channels-writer")
    user: User | None = None
    header = ws.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if header:
        user = hub.authenticate(token) if scheme.lower() == "bearer" else None
        if user is None:
            conn.close(CLOSE_UNAUTHORIZED, "unauthorized: wrong token")
    pending: set[asyncio.Task[None]] = set()
    try:
        while conn.closing is None:
            reader = asyncio.ensure_future(ws.receive())
            done, _ = await asyncio.wait([reader, writer], return_when=asyncio.FIRST_COMPLETED)
            if reader not in done:
                reader.cancel()
                break
            message = reader.result()
            if message["type"] == "websocket.disconnect":
                break
            raw: str | bytes = message.get("text") or message.get("bytes") or ""
            try:
                frame = parse_frame(raw, hub.config.max_frame)
            except BadFrame as exc:
                conn.close(exc.code, exc.reason)
                break
            if user is None:
                if isinstance(frame, Auth):
                    user = hub.authenticate(frame.token)
                if user is None:
                    conn.close(
                        CLOSE_UNAUTHORIZED,
                        "unauthorized: send the token in an Authorization header or an auth "
                        "frame first",
                    )
                    break
                continue
            if isinstance(frame, Subscribe):
                task = asyncio.ensure_future(_subscribe(hub, conn, user, frame))
                pending.add(task)
                task.add_done_callback(pending.discard)
            elif isinstance(frame, Unsubscribe):
                if hub.unsubscribe(conn, frame.channel):
                    conn.send(_unsub(frame.channel, UNSUB_CLIENT, "unsubscribed"))
            elif isinstance(frame, Publish):
                try:
                    await hub.publish(frame.channel, user, frame.data)
                except ChannelError as exc:
                    # A refused publication says so, and leaves any subscription alone.
                    reason = " ".join(exc.reason.split())
                    conn.send(dumps(Refused(channel=frame.channel, code=exc.code, reason=reason)))
        if conn.closing is not None and not writer.done():
            with contextlib.suppress(Exception):
                await asyncio.wait_for(writer, 5)
    except WebSocketDisconnect:
        pass
    except Exception as exc:  # a connection must never take the node down
        log.warning("channel connection failed", extra={"error": describe(exc)})
    finally:
        conn.ended.set()
        for task in pending:
            task.cancel()
        hub.drop(conn)
        writer.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await writer
        if ws.application_state is not WebSocketState.DISCONNECTED:
            with contextlib.suppress(Exception):
                await ws.close(1000)


async def _subscribe(hub: ChannelHub, conn: Connection, user: User, frame: Subscribe) -> None:
    try:
        if frame.relay is not None:
            if not user.cluster:
                raise BadFrame("relay subscriptions need the cluster token")
            conn.peer = frame.node
            await hub.relay_subscribe(conn, frame.channel, frame.relay, frame.since)
        else:
            await hub.subscribe(conn, frame.channel, user, frame.since)
    except BadFrame as exc:
        conn.close(exc.code, exc.reason)
    except ChannelError as exc:
        conn.send(_unsub(frame.channel, exc.code, exc.reason))
    except Exception as exc:
        log.warning("subscribe failed", extra={"channel": frame.channel, "error": describe(exc)})
        conn.send(_unsub(frame.channel, 4500, f"internal error: {describe(exc)[:100]}"))


def _unsub(channel: str, code: int, reason: str) -> str:
    return dumps(Unsubscribed(channel=channel, code=code, reason=" ".join(reason.split())))


__all__ = ["Connection", "serve", "short", "start_now"]
