"""Prebuilt frames written straight to the socket (:mod:`baton.channels.direct`), on a real
uvicorn server and a real WebSocket client: the bytes arrive as the text the protocol would
have sent, in order with the protocol's own frames; a subscriber that stops reading makes the
direct write step aside (flow control), and so does a closing connection."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.routing import WebSocketRoute
from starlette.websockets import WebSocket
from websockets.asyncio.client import connect

from baton.channels.direct import FrameCache, PrebuiltFrameProtocol, text_frame, writer_of

Handler = Callable[[WebSocket], Awaitable[None]]


@contextlib.asynccontextmanager
async def serving(handler: Handler) -> AsyncIterator[str]:
    """A uvicorn server with the node's WebSocket protocol class, one route: ``handler``."""

    async def endpoint(ws: WebSocket) -> None:
        await ws.accept()
        await handler(ws)

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)  # a client may connect before the server serves: it waits in the backlog
    port = sock.getsockname()[1]
    config = uvicorn.Config(
        Starlette(routes=[WebSocketRoute("/ws", endpoint)]),
        log_config=None,
        lifespan="off",
        ws_per_message_deflate=False,
        ws=PrebuiltFrameProtocol,
    )
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        yield f"ws://127.0.0.1:{port}/ws"
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 10)
        sock.close()


async def test_prebuilt_frames_arrive_as_text_in_order_with_the_protocols_own() -> None:
    async def handler(ws: WebSocket) -> None:
        write = writer_of(ws.scope)
        assert write is not None
        cache = FrameCache()
        await ws.send_text("first, by the protocol")
        for text in ["é ünïcode", "x" * 200, "y" * 70_000]:  # 7-, 16- and 64-bit lengths
            assert write(cache.frame(text))
        await ws.send_text("last, by the protocol")
        await ws.receive()  # until the client closes

    async with serving(handler) as url, connect(url, max_size=None) as client:
        got = [await client.recv() for _ in range(5)]
    sent = ["é ünïcode", "x" * 200, "y" * 70_000]
    assert got == ["first, by the protocol", *sent, "last, by the protocol"]


def test_the_cache_builds_a_texts_frame_once_and_by_identity() -> None:
    cache = FrameCache()
    text = "".join(["pub", "lication"])
    first = cache.frame(text)
    assert first == text_frame(text) and cache.frame(text) is first
    again = "".join(["pub", "lication"])  # equal, but another publication's object
    assert cache.frame(again) is not first and cache.frame(again) == first


async def test_a_subscriber_that_stops_reading_makes_the_direct_write_step_aside() -> None:
    outcome: asyncio.Future[int] = asyncio.get_running_loop().create_future()

    async def handler(ws: WebSocket) -> None:
        write = writer_of(ws.scope)
        assert write is not None
        frame = text_frame("z" * 60_000)
        written = 0
        # The client reads nothing: the kernel's buffers fill, the transport's buffer passes
        # its high-water mark and asks the protocol to pause; from then on it says no.
        while written < 100_000 and write(frame):
            written += 1
            await asyncio.sleep(0)  # let the transport report what the socket took
        outcome.set_result(written)
        await ws.receive()

    async with serving(handler) as url, connect(url, max_size=None, max_queue=1) as client:
        # Stop reading: the client's own buffers are small (max_queue=1), so the socket fills.
        client.transport.pause_reading()
        written = await asyncio.wait_for(outcome, 30)
        client.transport.resume_reading()
    assert 0 < written < 100_000


@pytest.mark.parametrize("who", ["client", "server"])
async def test_a_closing_connection_takes_no_direct_write(who: str) -> None:
    refused: asyncio.Future[bool] = asyncio.get_running_loop().create_future()

    async def handler(ws: WebSocket) -> None:
        write = writer_of(ws.scope)
        assert write is not None
        if who == "server":
            await ws.close(1000)
        else:
            message = await ws.receive()
            assert message["type"] == "websocket.disconnect"
        refused.set_result(not write(text_frame("after the close")))

    async with serving(handler) as url:
        async with connect(url) as client:
            if who == "client":
                await client.close()
            else:
                await client.wait_closed()
        assert await asyncio.wait_for(refused, 10)


async def test_without_the_extension_there_is_no_direct_write() -> None:
    assert writer_of({"type": "websocket", "extensions": {"websocket.http.response": {}}}) is None
    assert writer_of({"type": "websocket"}) is None
