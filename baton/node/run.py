"""``baton node``: run one agent and its API until SIGTERM or Ctrl-C, then stop gracefully."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import Generator

import uvicorn

from baton import logs
from baton.channels.direct import PrebuiltFrameProtocol
from baton.node.agent import NodeAgent
from baton.node.api import build_app
from baton.node.config import NodeConfig
from baton.node.heap import HeapKeeper

log = logging.getLogger("baton.node")


class _Server(uvicorn.Server):
    """uvicorn re-raises a captured SIGTERM once it has served, which would kill the process
    before the agent released its leases; baton handles the signals itself."""

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield


async def serve(config: NodeConfig) -> None:
    """Start the agent, serve the API, and on a stop signal resign and release everything."""
    agent = NodeAgent(config)
    logs.set_context(agent.log_context)
    host, port = config.host_port()
    server = _Server(
        uvicorn.Config(
            build_app(agent),
            host=host,
            port=port,
            log_config=None,  # baton's key=value logs; uvicorn's access log would be noise
            access_log=False,
            lifespan="off",
            # No permessage-deflate: it keeps a compressor per connection, so a channel's
            # publication would be compressed once per subscriber (the fan-out's largest
            # per-subscriber cost) to save a few bytes on frames of a hundred.
            ws_per_message_deflate=False,
            # The same protocol, able to write a publication's frame, built once, straight
            # to each subscriber's socket (baton.channels.direct).
            ws=PrebuiltFrameProtocol,
            # A request still running at a stop (a peer's call) must not keep the node from
            # releasing its leases: give it a moment, then go on.
            timeout_graceful_shutdown=max(1, round(agent.timings.request_timeout * 4)),
        )
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()

    handover: list[asyncio.Future[None]] = []
    grace = max(1, round(agent.timings.request_timeout * 4))

    async def wind_down() -> None:
        # While the API still serves (relays and peers ask it who leads now): hand the
        # channels and the controller role over, then close every channel connection with
        # 1001 ("reconnect to another node"), and only then stop the HTTP server, whose own
        # shutdown would close what is left with 1012.
        try:
            async with asyncio.timeout(grace):
                await agent.hand_over()
        except TimeoutError:
            log.warning("handover unfinished at stop", extra={"after_s": grace})
        finally:
            await agent.channels.going_away(timeout=1.0)
            server.should_exit = True

    def on_signal() -> None:
        if not stop.is_set():
            handover.append(asyncio.ensure_future(wind_down()))
        stop.set()

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, on_signal)
    # The node's process is baton's own: keep its collector's pauses short (baton.node.heap).
    heap = HeapKeeper()
    heap.start()
    try:
        starting = asyncio.ensure_future(agent.start())
        await asyncio.wait(
            [starting, asyncio.ensure_future(stop.wait())], return_when="FIRST_COMPLETED"
        )
        if not stop.is_set():
            starting.result()
            await server.serve()
        else:
            starting.cancel()
    finally:
        if handover:
            await asyncio.gather(*handover, return_exceptions=True)
        await agent.stop()
        await heap.stop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
        logs.set_context(None)
