"""The web dashboard in the node's API (docs/dashboard.md).

``/ui`` serves one static page, its script and its style sheet (package data in
``baton/node/ui/``). They hold no data, so they are served without the token; the page asks for
the cluster token, keeps it in the browser tab's ``sessionStorage`` and sends it as a Bearer
token to the data routes and in the first frame of its socket, never in a URL. The page's
Content-Security-Policy allows scripts, styles and connections from the node itself only (no
inline script), and it builds every name it shows as text, never as markup.

Data, each behind the cluster token:

- ``GET /v1/ui/snapshot``: what the page shows, as JSON (:mod:`baton.node.ui_snapshot`);
- ``/v1/ui/ws``: the same snapshot, pushed whenever it changes (:mod:`baton.node.ui_feed`: one
  timer per node, shared by every page). A browser cannot set headers on a WebSocket, so the
  first frame carries the token, ``{"type": "auth", "token": "..."}``; a wrong one (or none
  within :data:`AUTH_WAIT` seconds) closes the socket with 1008 (policy violation). Then the
  node sends ``{"type": "snapshot", "version": N, "data": {...}}`` now and after each change.

Operations (pause, resume, switchover with its dry run first, automatic failover on or off) are
the page calling the ``/v1/cascade`` routes the command line uses: there is no other path.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import re
from collections.abc import Sequence
from importlib import resources

from fastapi import APIRouter, Request, Response, WebSocket, WebSocketDisconnect, params
from fastapi.responses import JSONResponse

from baton.node.ui_feed import Feed
from baton.node.ui_snapshot import Snapshots

#: Seconds a socket has to send its ``auth`` frame.
AUTH_WAIT = 5.0
#: WebSocket close code for a missing or wrong token (RFC 6455: policy violation).
CLOSE_POLICY = 1008

#: What a Host header may hold for it to be named in the policy's connect-src.
_HOST = re.compile(r"^[A-Za-z0-9.\-]+(:[0-9]{1,5})?$|^\[[0-9A-Fa-f:.]+\](:[0-9]{1,5})?$")

_FILES = {
    "index.html": "text/html; charset=utf-8",
    "app.js": "text/javascript; charset=utf-8",
    "app.css": "text/css; charset=utf-8",
}


def _static() -> dict[str, bytes]:
    folder = resources.files("baton.node") / "ui"
    return {name: (folder / name).read_bytes() for name in _FILES}


def _headers(host: str | None) -> dict[str, str]:
    # connect-src names the node's own ws:// and wss:// origins: 'self' alone does not cover
    # WebSockets in every browser.
    sockets = f" ws://{host} wss://{host}" if host and _HOST.match(host) else ""
    policy = (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
        f"connect-src 'self'{sockets}; form-action 'none'; frame-ancestors 'none'; "
        "base-uri 'none'"
    )
    return {
        "content-security-policy": policy,
        "x-content-type-options": "nosniff",
        "referrer-policy": "no-referrer",
        "x-frame-options": "DENY",
        "cache-control": "no-store",
    }


def ui_router(snapshots: Snapshots, token: bytes, auth: Sequence[params.Depends]) -> APIRouter:
    """The page, its files, the snapshot route and the socket. ``token``: the cluster token,
    for the socket's first frame (the routes use ``auth``)."""
    router = APIRouter()
    files = _static()
    feed = Feed(snapshots.build)

    def serve(name: str, request: Request) -> Response:
        return Response(
            files[name], media_type=_FILES[name], headers=_headers(request.headers.get("host"))
        )

    @router.get("/ui", include_in_schema=False)
    @router.get("/ui/", include_in_schema=False)
    async def page(request: Request) -> Response:
        """The dashboard's page (no data in it: served without the token)."""
        return serve("index.html", request)

    @router.get("/ui/app.js", include_in_schema=False)
    async def script(request: Request) -> Response:
        return serve("app.js", request)

    @router.get("/ui/app.css", include_in_schema=False)
    async def style(request: Request) -> Response:
        return serve("app.css", request)

    @router.get("/v1/ui/snapshot", dependencies=list(auth))
    async def snapshot() -> JSONResponse:
        """What the dashboard shows: nodes, controller, placement, cascade sets with their
        lag history, channels, store failover and the timeline of leadership changes."""
        data = await feed.current()
        return JSONResponse(data, headers={"cache-control": "no-store"})

    @router.websocket("/v1/ui/ws")
    async def socket(ws: WebSocket) -> None:
        """The snapshot, pushed when it changes; the first frame must carry the token."""
        await ws.accept()
        try:
            async with asyncio.timeout(AUTH_WAIT):
                first = await ws.receive()
        except TimeoutError:
            await ws.close(CLOSE_POLICY, "unauthorized: send the token in an auth frame")
            return
        if first["type"] == "websocket.disconnect":
            return
        if not _authorized(first.get("text"), token):
            # The frame is never logged or echoed: it may hold a token, right or nearly.
            await ws.close(CLOSE_POLICY, "unauthorized: wrong token")
            return
        sender = asyncio.create_task(_send(ws, feed))
        reader = asyncio.create_task(_drain(ws))
        try:
            await asyncio.wait([sender, reader], return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (sender, reader):
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, WebSocketDisconnect, RuntimeError):
                    await task

    return router


def _authorized(frame: str | None, token: bytes) -> bool:
    if frame is None:
        return False
    try:
        message = json.loads(frame)
    except ValueError:
        return False
    if not isinstance(message, dict) or message.get("type") != "auth":
        return False
    given = message.get("token")
    return isinstance(given, str) and hmac.compare_digest(given.encode(), token)


async def _send(ws: WebSocket, feed: Feed) -> None:
    async with contextlib.aclosing(feed.updates()) as updates:
        async for version, data in updates:
            await ws.send_text(json.dumps({"type": "snapshot", "version": version, "data": data}))


async def _drain(ws: WebSocket) -> None:
    """Read (and ignore) what the page sends, until it goes: then the socket's sender stops
    too, and with the last page the feed's timer."""
    while (await ws.receive())["type"] != "websocket.disconnect":
        pass


__all__ = ["AUTH_WAIT", "CLOSE_POLICY", "ui_router"]
