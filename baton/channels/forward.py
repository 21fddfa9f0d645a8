"""Forwarding to a channel's leader over HTTP: a follower asks the leader for a subscriber's
initial data (``POST /v1/channels/subscribe``, the permission check and the data at the
epoch the follower believes), and any node asks the others for their channel views.

Calls go through the shared peer transport (:mod:`baton.transport`); nodes' addresses are read
from their node records and cached until a call to the node fails.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from pydantic import ValidationError

from baton.errors import ChannelError, ChannelUnavailable, PeerError, StoreError
from baton.keys import node_record
from baton.store import Store
from baton.transport import PeerTransport

from .handler import User
from .metrics import ChannelMetrics
from .protocol import ForwardedSubscribe, Survey, SurveyRefusal


class Forwarder:
    """This node's calls to other nodes about channels."""

    def __init__(self, store: Store, transport: PeerTransport, metrics: ChannelMetrics) -> None:
        self.store = store
        self.transport = transport
        self.metrics = metrics
        self._addresses: dict[str, str] = {}
        self._surveys: dict[tuple[str, User, int], asyncio.Future[Survey]] = {}

    async def address(self, node: str) -> str:
        """``node``'s API address (``host:port``), from its node record."""
        address = self._addresses.get(node)
        if address is None:
            rec = await self.store.get(node_record(node))
            if rec is None:
                raise ChannelUnavailable(f"leader {node} has no node record: is it running?")
            address = self._addresses[node] = str(json.loads(rec.value)["address"])
        return address

    def forget(self, node: str) -> None:
        """A call to ``node`` failed: read its address again next time (it may have moved)."""
        self._addresses.pop(node, None)

    async def survey(
        self, leader: str, channel: str, user: User, epoch: int, since: int | None
    ) -> Survey:
        """Ask ``leader`` for ``user``'s start in ``channel`` at ``epoch``. Without ``since``,
        one request in flight per channel, user and epoch: a burst of subscribers at this node
        (a reconnect wave, a new epoch) costs the leader one request, and they get the same
        data, as they would have a moment apart."""
        if since is not None:
            return await self._counted(leader, channel, user, epoch, since)
        key = (channel, user, epoch)
        shared = self._surveys.get(key)
        if shared is None:
            shared = asyncio.ensure_future(self._counted(leader, channel, user, epoch, None))
            self._surveys[key] = shared
            shared.add_done_callback(lambda _: self._surveys.pop(key, None))
        return await asyncio.shield(shared)

    async def _counted(
        self, leader: str, channel: str, user: User, epoch: int, since: int | None
    ) -> Survey:
        try:
            answer = await self._ask(leader, channel, user, epoch, since)
        except ChannelUnavailable:
            self.metrics.forwarded.labels(outcome="unavailable").inc()
            raise
        except ChannelError:
            self.metrics.forwarded.labels(outcome="refused").inc()
            raise
        self.metrics.forwarded.labels(outcome="ok").inc()
        return answer

    async def _ask(
        self, leader: str, channel: str, user: User, epoch: int, since: int | None
    ) -> Survey:
        body = ForwardedSubscribe(
            channel=channel,
            epoch=epoch,
            since=since,
            user=user.id,
            cluster=user.cluster,
            namespace=user.namespace,
        )
        try:
            address = await self.address(leader)
            answer = await self.transport.call(
                address, "POST", "/v1/channels/subscribe", body.model_dump()
            )
        except (PeerError, StoreError) as exc:
            self.forget(leader)
            raise ChannelUnavailable(
                f"leader {leader} of {channel} did not answer ({exc}): subscribe again"
            ) from None
        try:
            if not answer.get("ok"):
                refusal = SurveyRefusal.model_validate(answer)
                raise ChannelError.from_code(refusal.code, refusal.reason)
            return Survey.model_validate(answer)
        except ValidationError:
            raise ChannelUnavailable(
                f"leader {leader} of {channel} answered something else than a subscribe answer"
            ) from None

    async def views(self, nodes: dict[str, str]) -> dict[str, list[dict[str, Any]]]:
        """Every node's channel view (``GET /v1/channels``) by node, from ``nodes`` (node to
        address); a node that does not answer has none."""
        views: dict[str, list[dict[str, Any]]] = {}

        async def ask(node: str, address: str) -> None:
            try:
                views[node] = list(
                    (await self.transport.call(address, "GET", "/v1/channels"))["channels"]
                )
            except (PeerError, KeyError, TypeError):
                views[node] = []

        await asyncio.gather(*(ask(n, a) for n, a in nodes.items()))
        return views


__all__ = ["Forwarder"]
