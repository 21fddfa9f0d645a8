"""Live channels in the node's API: the WebSocket endpoint every subscriber uses, the forwarded
subscribe a follower node sends to a channel's leader, and the channel listings.

``/v1/channels/ws`` authenticates itself (an Authorization header or a first ``auth`` frame,
see :mod:`baton.channels.protocol`), so that browsers, which cannot set headers on a WebSocket,
can subscribe too. The other routes take the cluster token like every route of the API.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fastapi import APIRouter, WebSocket, params
from fastapi.responses import JSONResponse

from baton.channels.handler import User
from baton.channels.hub import ChannelHub
from baton.channels.protocol import ForwardedSubscribe, SurveyRefusal
from baton.channels.server import serve
from baton.errors import ChannelError


def channels_router(hub: ChannelHub, auth: Sequence[params.Depends]) -> APIRouter:
    router = APIRouter()

    @router.websocket("/v1/channels/ws")
    async def channel_socket(websocket: WebSocket) -> None:
        """Subscribe to channels (the protocol of docs/channels.md)."""
        await serve(websocket, hub)

    @router.post("/v1/channels/subscribe", dependencies=list(auth))
    async def forwarded(body: ForwardedSubscribe) -> JSONResponse:
        """On the channel's leader: check the subscriber, compute its initial data at
        ``epoch`` and confirm the leadership atomically. Refusals are ``ok: false`` with the
        protocol's code and reason."""
        user = User(body.user, cluster=body.cluster, namespace=body.namespace)
        try:
            answer = await hub.survey(body.channel, user, body.epoch, body.since)
        except ChannelError as exc:
            return JSONResponse(SurveyRefusal(code=exc.code, reason=exc.reason).model_dump())
        return JSONResponse(answer.wire())

    @router.get("/v1/channels", dependencies=list(auth))
    async def channels() -> dict[str, Any]:
        """This node's channels: role, leader, epoch, offset, subscribers, relays."""
        return {"node": hub.node, "channels": hub.view()}

    @router.get("/v1/channels/cluster", dependencies=list(auth))
    async def cluster() -> dict[str, Any]:
        """Every channel of the cluster: leader, epoch, offset, subscribers per node."""
        return {"channels": await hub.cluster_view()}

    return router


__all__ = ["channels_router"]
