"""``ChannelHub``: the channels of one node. Every node runs one; the node agent serves it on its
WebSocket endpoint.

For each channel some node has subscribers on, the hub is either

* the **leader**: it holds the lease ``channels/<channel>`` and runs the handler's upstream;
  the stream's epoch is the lease's epoch; offsets count publications from 1 within the
  epoch; the last ``history`` publications are kept for recovery; or
* a **follower**: it holds one relay connection to the leader's WebSocket endpoint (with the
  cluster token), keeps the same history from it, and forwards each new subscriber's subscribe
  to the leader over HTTP (``POST /v1/channels/subscribe``) for the permission check and the
  initial data.

The hub itself keeps the subscribers: it subscribes and recovers them, answers forwarded
subscribes when it leads, lets a channel linger after its last subscriber, and stops. The
other jobs have a module each: the stream, its history and the epoch fence
(:mod:`~baton.channels.stream`), leading and following (:mod:`~baton.channels.leadership`),
the upstream, its restarts and watchdog (:mod:`~baton.channels.upstream`), the relay
(:mod:`~baton.channels.relay`), forwarding to the leader (:mod:`~baton.channels.forward`) and
the metrics (:mod:`~baton.channels.metrics`).

Safety (seed 000's scenarios, besides those of the modules above):

* A forwarded subscribe names the epoch the follower believes; the leader computes the initial
  data, then renews the lease at that epoch in one atomic store call and refuses when it cannot
  (scenario 6); the follower re-reads the lease and tries again, and after ``RETRIES`` answers
  the subscriber with code 4503 (scenario 2).
* The last subscriber leaving anywhere lets the upstream linger, then releases the lease; a
  node stopping hands each channel it leads to a node that relays it, by name.

Every timer (the linger, retries, restarts, the watchdog and the checks) runs on the hub's
``clock``; timeouts that only bound a store call or a connection stay in real seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Mapping
from typing import Any

from prometheus_client import CollectorRegistry

from baton.clock import SYSTEM, Clock
from baton.errors import ChannelError, ChannelRefused, ChannelUnavailable, StoreError
from baton.lease.role import Role
from baton.lease.timings import Timings
from baton.logs import describe
from baton.store import Store
from baton.transport import PeerTransport

from .config import ChannelsConfig, ChannelTimings
from .forward import Forwarder
from .handler import (
    CLUSTER_USER,
    Channel,
    Context,
    User,
    handler_for,
    load_handlers,
    parse_channel,
)
from .leadership import Leadership
from .metrics import ChannelMetrics
from .protocol import CLOSE_GOING_AWAY, Gap, Pub, Since, Survey, parse_node_frame
from .stream import LEASES, Registry, Sink, Stream, Sub, Tasks, lease_name

log = logging.getLogger("baton.channels")

#: Attempts of one subscribe when the leader does not answer or changes meanwhile.
RETRIES = 3

#: A survey under way: channel, this node's role and the leader it asks, user, epoch.
SurveyKey = tuple[str, Role, str | None, User, int]


class ChannelHub:
    """The channels of node ``node``. ``address`` is this node's advertised ``host:port``."""

    def __init__(
        self,
        store: Store,
        node: str,
        token: str,
        lease_timings: Timings,
        *,
        config: ChannelsConfig | None = None,
        registry: CollectorRegistry | None = None,
        listen_host: str | None = None,
        clock: Clock = SYSTEM,
    ) -> None:
        self.store = store
        self.node = node
        self._token = token
        self.clock = clock
        self.config = config or ChannelsConfig()
        self.timings: ChannelTimings = self.config.timings(lease_timings)
        self.handlers = load_handlers(self.config.handlers)
        self.metrics = ChannelMetrics(registry or CollectorRegistry())
        self.registry = Registry()
        self.tasks = Tasks()
        # The transport bounds each call in real seconds (the network's time, not the hub's).
        self.transport = PeerTransport(token, self.timings.forward_timeout, listen_host)
        self.forwarder = Forwarder(store, self.transport, self.metrics)
        self.leadership = Leadership(
            store,
            node,
            token,
            self.registry,
            forwarder=self.forwarder,
            timings=self.timings,
            metrics=self.metrics,
            clock=clock,
            tasks=self.tasks,
            settings=self._settings,
            resubscribe=self._resubscribe,
            listen_host=listen_host,
        )
        self.keeper = self.leadership.keeper
        self._loops: list[asyncio.Task[None]] = []
        #: Every open connection (subscribed or not), closed with 1001 at a stop.
        self._sinks: set[Sink] = set()
        #: Surveys under way, shared by the subscribers of one user that arrive meanwhile.
        self._surveys: dict[SurveyKey, asyncio.Future[Survey]] = {}

    @property
    def streams(self) -> dict[str, Stream]:
        """This node's streams by channel name."""
        return self.registry.streams

    # -- lifecycle ------------------------------------------------------------------------

    async def start(self) -> None:
        await self.keeper.start()
        self._loops = self.leadership.loops()

    async def stop(self) -> None:
        """Hand every channel this node leads to a node that relays it (by name), close every
        relay and connection, release the rest."""
        self.registry.stopping = True
        for task in self._loops:
            task.cancel()
        for stream in self.registry:
            with contextlib.suppress(Exception):
                # Real seconds: this bounds the store calls of a stop.
                async with asyncio.timeout(self.timings.lease.request_timeout * 4):
                    await self._stop_stream(stream, handover=True)
        self.tasks.cancel()
        await self.keeper.stop()
        await self.transport.close()

    async def hand_over(self) -> None:
        """The first step of a clean stop: hand each channel this node leads to a node that
        relays it, by name (the lease is reserved for it), and accept no more subscribers."""
        self.registry.stopping = True
        for stream in self.registry:
            if stream.role == Role.LEADER:
                with contextlib.suppress(Exception):
                    # Real seconds: this bounds the store calls of a handover.
                    async with asyncio.timeout(self.timings.lease.request_timeout * 4):
                        await self._stop_stream(stream, handover=True)

    # -- authentication -------------------------------------------------------------------

    def authenticate(self, token: str) -> User | None:
        """The cluster user for the cluster token, a handler's user for a token it accepts,
        else None. The token is never logged."""
        import hmac

        if hmac.compare_digest(token.encode(), self._token.encode()):
            return CLUSTER_USER
        for ns, handler in self.handlers.items():
            user = handler.authenticate(token)
            if user is not None:
                return User(user, namespace=ns)
        return None

    # -- subscribers ----------------------------------------------------------------------

    async def subscribe(
        self, sink: Sink, channel_name: str, user: User, since: Since | None
    ) -> None:
        """Subscribe ``sink`` to a channel; frames start flowing to it. Raises a
        :class:`ChannelError` whose code and reason the subscriber gets."""
        channel = parse_channel(channel_name)
        handler = handler_for(self.handlers, channel)
        if not user.cluster and user.namespace != channel.namespace:
            raise ChannelRefused(f"this token does not give access to channel {channel}")
        stream = self.streams.get(channel.name)
        if stream is None or stream.finished:
            stream = self.streams[channel.name] = Stream(channel, handler, self.config.history)
        self._cancel_linger(stream)
        # A placeholder while the subscribe runs, so that no linger releases the channel.
        stream.subs[sink] = Sub(user, 0, 0)
        try:
            await self._subscribe(stream, sink, user, since)
        except BaseException:
            if stream.subs.get(sink) is not None and stream.subs[sink].epoch == 0:
                del stream.subs[sink]
                self._maybe_linger(stream)
            raise
        self._count()

    async def _subscribe(self, stream: Stream, sink: Sink, user: User, since: Since | None) -> None:
        last: ChannelError | None = None
        for attempt in range(RETRIES):
            if attempt:
                await self.clock.sleep(min(self.timings.forward_timeout, 0.1 * 2**attempt))
            await self.leadership.ensure(stream)
            if stream.epoch == 0:
                last = ChannelUnavailable(
                    f"channel {stream.name} has no reachable leader now: subscribe again"
                )
                continue
            epoch = stream.epoch
            if since is not None and stream.recover(sink, user, since):
                return
            after = since.offset if since is not None and since.epoch == epoch else None
            try:
                answer = await self._initial(stream, user, epoch, after)
            except ChannelUnavailable as exc:
                last = exc
                await self.leadership.recheck(stream)
                continue
            if stream.epoch != epoch:  # changed while we asked
                continue
            self._attach(stream, sink, user, epoch, answer)
            return
        assert last is not None
        raise last

    def _attach(self, stream: Stream, sink: Sink, user: User, epoch: int, answer: Survey) -> None:
        """Start ``sink`` from a survey's ``answer``: fresh data at the leader's offset, or
        (recovered) the frames the leader had after the subscriber's offset."""
        sub = stream.subs[sink] = Sub(user, epoch, answer.offset)
        sink.send(stream.subscribed(answer.offset, answer.data, recovered=answer.recovered))
        for text in answer.frames:
            frame = parse_node_frame(text)
            if isinstance(frame, Pub | Gap) and frame.epoch == epoch and frame.offset > sub.after:
                sub.after = frame.offset
                sink.send(text, frame.ts if isinstance(frame, Pub) else None)
        # What this node already has beyond that.
        for entry in stream.history:
            if entry.offset > sub.after:
                sink.send(entry.text, entry.ts)
                sub.after = entry.offset

    async def relay_subscribe(
        self, sink: Sink, channel_name: str, epoch: int, since: Since | None
    ) -> None:
        """Another node follows this leader's stream at ``epoch``."""
        stream = self.streams.get(channel_name)
        if (
            stream is None
            or stream.role != Role.LEADER
            or stream.epoch != epoch
            or self.keeper.get(lease_name(channel_name)) is None
        ):
            raise ChannelUnavailable(f"{self.node} does not lead {channel_name} at epoch {epoch}")
        self._cancel_linger(stream)
        if since is not None and stream.recover(sink, CLUSTER_USER, since):
            stream.subs[sink].relay = True
        else:
            stream.subs[sink] = Sub(CLUSTER_USER, epoch, stream.offset, relay=True)
            sink.send(stream.subscribed(stream.offset, None, recovered=False))
        self._count()

    def unsubscribe(self, sink: Sink, channel_name: str) -> bool:
        stream = self.streams.get(channel_name)
        if stream is None or stream.subs.pop(sink, None) is None:
            return False
        self._maybe_linger(stream)
        self._count()
        return True

    def attach(self, sink: Sink) -> None:
        """A connection opened: :meth:`going_away` closes it at a stop."""
        self._sinks.add(sink)

    async def going_away(self, timeout: float) -> None:
        """The node is stopping: close every connection with 1001 (reconnect to another node)
        and wait, up to ``timeout`` seconds, until the close frames went out, so that none
        is left for the HTTP server's own shutdown (which closes with 1012, "service
        restart")."""
        self.registry.stopping = True
        sinks = list(self._sinks)
        for sink in sinks:
            sink.close(CLOSE_GOING_AWAY, f"node {self.node} is stopping: reconnect to another node")
        if sinks:
            with contextlib.suppress(TimeoutError):
                # Real seconds: this waits for close frames to go out.
                async with asyncio.timeout(timeout):
                    await asyncio.gather(*(s.wait_closed() for s in sinks))

    def drop(self, sink: Sink) -> None:
        """A connection closed: forget its subscriptions."""
        self._sinks.discard(sink)
        for stream in self.registry:
            if stream.subs.pop(sink, None) is not None:
                self._maybe_linger(stream)
        self._count()

    async def publish(self, channel_name: str, user: User, data: Any) -> None:
        """A client's publication, handed to the channel's handler on this node."""
        channel = parse_channel(channel_name)
        handler = handler_for(self.handlers, channel)
        stream = self.streams.get(channel.name)
        ctx = stream.ctx if stream is not None and stream.ctx is not None else None
        if ctx is None:
            ctx = Context(
                self.node, channel, 0, self.store, self._settings(channel), clock=self.clock
            )
        await handler.publish(ctx, user, channel, data)

    def _count(self) -> None:
        self.metrics.count(self.registry)

    def _settings(self, channel: Channel) -> Mapping[str, Any]:
        return self.config.settings.get(channel.namespace, {})

    async def _resubscribe(self, stream: Stream, subs: list[tuple[Sink, Sub]]) -> None:
        """Give subscribers of an older epoch the current one, with fresh data (one survey per
        user: they get the same data)."""
        epoch = stream.epoch
        answers: dict[User, Survey | ChannelError] = {}
        for sink, sub in subs:
            if stream.subs.get(sink) is not sub or stream.epoch != epoch:
                continue
            if sub.relay:
                continue  # relays were closed when leadership moved
            if sub.user not in answers:
                try:
                    answers[sub.user] = await self._initial(stream, sub.user, epoch)
                except ChannelError as exc:
                    answers[sub.user] = exc
            if stream.subs.get(sink) is not sub or stream.epoch != epoch:
                continue
            answer = answers[sub.user]
            if isinstance(answer, ChannelError):
                del stream.subs[sink]
                sink.send(stream.unsubscribed(answer.code, answer.reason))
                continue
            self._attach(stream, sink, sub.user, epoch, answer)
        self._maybe_linger(stream)
        self._count()

    # -- the survey: initial data at the leader --------------------------------------------

    async def _initial(
        self, stream: Stream, user: User, epoch: int, since: int | None = None
    ) -> Survey:
        if stream.role != Role.LEADER:
            await self._relay_started(stream)
        if since is not None and stream.role != Role.LEADER:
            # A subscriber coming back asks for what it missed after its own offset.
            assert stream.leader is not None
            return await self.forwarder.survey(stream.leader, stream.name, user, epoch, since)
        # Subscribers of one user arriving while a survey for that user is under way share
        # it: its data is computed at the leader after the survey was asked, and every
        # publication after its offset follows from the history, so a subscriber that joins
        # it is in the state it would be in had it subscribed at that moment. A burst of
        # subscribes then costs a few surveys (and lease renewals, and forwarded requests)
        # instead of one each.
        key = (stream.name, stream.role, stream.leader, user, epoch)
        shared = self._surveys.get(key)
        if shared is None:
            if stream.role == Role.LEADER:
                shared = asyncio.ensure_future(self.survey(stream.name, user, epoch))
            else:
                assert stream.leader is not None
                shared = asyncio.ensure_future(
                    self.forwarder.survey(stream.leader, stream.name, user, epoch, None)
                )
            self._surveys[key] = shared
            shared.add_done_callback(lambda done: self._forget_survey(key, done))
        return await asyncio.shield(shared)

    async def _relay_started(self, stream: Stream) -> None:
        """At a follower, wait for the relay's first answer from the leader before asking the
        leader for a subscriber's start. The subscriber takes what follows the leader's answer
        from this node's history; asked before the relay started, the answer could end before
        the offset the relay starts at, and the publications between would reach nobody here.
        Asked after, the answer ends at or beyond it. Refused (:class:`ChannelUnavailable`)
        when the relay's attempt fails or takes too long."""
        if stream.relayed:
            return
        waiter: asyncio.Future[str | None] = asyncio.get_running_loop().create_future()
        stream.relay_waiters.append(waiter)
        error: str | None = (
            f"leader {stream.leader} of {stream.name} did not answer this node's relay:"
            " subscribe again"
        )
        # Twice a relay's own connect timeout: its failure, with its reason, comes first.
        with contextlib.suppress(TimeoutError):
            async with self.clock.timeout(2 * self.timings.forward_timeout):
                error = await waiter
        if error is not None:
            # Counted as a forwarded subscribe the leader did not answer: it is one, cut short.
            self.metrics.forwarded.labels(outcome="unavailable").inc()
            raise ChannelUnavailable(error)

    def _forget_survey(self, key: SurveyKey, done: asyncio.Future[Survey]) -> None:
        if self._surveys.get(key) is done:
            del self._surveys[key]
        if not done.cancelled():
            done.exception()  # retrieved: every subscriber that shared it got it already

    async def survey(
        self, channel_name: str, user: User, epoch: int, since: int | None = None
    ) -> Survey:
        """On the leader: check ``user`` may subscribe and compute the initial data at
        ``epoch``, then renew the lease at that epoch in one atomic store call (refused with
        :class:`ChannelUnavailable` if leadership changed meanwhile). With ``since`` (an
        offset of this epoch) still in the history, the answer is the frames after it instead
        (``recovered``: a subscriber of this epoch coming back, already allowed in it)."""
        stream = self.streams.get(channel_name)
        lease = self.keeper.get(lease_name(channel_name))
        if stream is None or stream.role != Role.LEADER or lease is None or lease.epoch != epoch:
            raise ChannelUnavailable(f"{self.node} does not lead {channel_name} at epoch {epoch}")
        offset = stream.offset
        missed = stream.since(since) if since is not None else None
        if since is not None and missed is not None:
            frames = tuple(e.text for e in missed)
            return Survey(epoch=epoch, offset=since, recovered=True, frames=frames)
        assert stream.ctx is not None
        data = await stream.handler.subscribe(stream.ctx, user, stream.channel)
        try:
            # Real seconds: this bounds a store call.
            async with asyncio.timeout(self.timings.lease.request_timeout):
                renewed = await self.store.renew(self.node, [lease])
        except (StoreError, TimeoutError) as exc:
            raise ChannelUnavailable(
                f"{self.node} cannot confirm its leadership of {channel_name}: {describe(exc)}"
            ) from None
        if renewed.get(lease.name) is None:
            # Another holder has the lease now: the initial data may already be stale for its
            # stream. Said here, since the refusal itself goes to another node's subscriber.
            log.warning(
                "forwarded subscribe refused: leadership changed during it",
                extra={"channel": channel_name, "epoch": epoch},
            )
            raise ChannelUnavailable(f"leadership of {channel_name} changed during the subscribe")
        return Survey(epoch=epoch, offset=offset, data=data)

    # -- linger and stop ------------------------------------------------------------------

    def _cancel_linger(self, stream: Stream) -> None:
        if stream.linger is not None:
            stream.linger.cancel()
            stream.linger = None

    def _maybe_linger(self, stream: Stream) -> None:
        if stream.subs or stream.linger is not None or stream.finished:
            return
        stream.linger = self.tasks.spawn(self._linger(stream), f"linger:{stream.name}")

    async def _linger(self, stream: Stream) -> None:
        await self.clock.sleep(self.timings.linger)
        stream.linger = None
        if not stream.subs and self.streams.get(stream.name) is stream:
            await self._stop_stream(stream, handover=False)

    async def _stop_stream(self, stream: Stream, handover: bool) -> None:
        """Stop following or leading ``stream``; a leader hands the lease to a node that
        relays it (``handover``) or releases it."""
        successor = None
        if handover and stream.role == Role.LEADER:
            peers = sorted({s.peer for s, sub in stream.subs.items() if sub.relay and s.peer})
            successor = peers[0] if peers else None
        lease = self.keeper.get(lease_name(stream.name))
        stream.finished = True
        # The upstream stops first, then the lease goes (to the successor), and only then are
        # the relays told: one that looks at the lease at once sees the successor's turn.
        await self.leadership.halt(stream, "", notify=False)
        if lease is not None:
            with contextlib.suppress(StoreError, TimeoutError):
                # Real seconds: this bounds a store call.
                async with asyncio.timeout(self.timings.lease.request_timeout):
                    await self.store.release(lease, successor=successor)
            await self.leadership.drop_lease(lease.name)
        self.leadership.notify_relays(
            stream,
            f"{self.node} handed {stream.name} over to {successor}" if successor else "stopped",
        )
        for sink, sub in list(stream.subs.items()):
            if not sub.relay:
                sink.close(1001, f"node {self.node} is stopping: reconnect to another node")
        stream.subs.clear()
        self.registry.remove(stream)
        if successor:
            log.info("channel handed over", extra={"channel": stream.name, "to": successor})
        self._count()

    # -- views ----------------------------------------------------------------------------

    def view(self) -> list[dict[str, Any]]:
        """This node's channels: role, leader, epoch, offset, local subscribers, relays."""
        return [
            {
                "channel": s.name,
                "role": s.role,
                "leader": s.leader,
                "epoch": s.epoch,
                "offset": s.offset,
                "subscribers": s.clients(),
                "relays": s.relays(),
            }
            for s in sorted(self.registry, key=lambda x: x.name)
        ]

    async def cluster_view(self) -> list[dict[str, Any]]:
        """Every channel of the cluster: leader and epoch from the store, offset from its
        leader, subscribers per node (from every node that answers)."""
        leases = await self.store.list_leases(LEASES)
        records, _ = await self.store.list("nodes/")
        others = {
            r.key.removeprefix("nodes/"): str(json.loads(r.value)["address"])
            for r in records
            if r.key.removeprefix("nodes/") != self.node
        }
        views = {self.node: self.view(), **await self.forwarder.views(others)}
        out: dict[str, dict[str, Any]] = {}
        for lease in leases:
            name = lease.name.removeprefix(LEASES)
            out[name] = {
                "channel": name,
                "leader": lease.holder,
                "epoch": lease.epoch,
                "offset": None,
                "subscribers": {},
            }
        for node, rows in views.items():
            for row in rows:
                item = out.setdefault(
                    row["channel"],
                    {"channel": row["channel"], "leader": None, "epoch": None, "offset": None,
                     "subscribers": {}},
                )  # fmt: skip
                if row["subscribers"]:
                    item["subscribers"][node] = row["subscribers"]
                if row["role"] == Role.LEADER and row["epoch"] == item["epoch"]:
                    item["offset"] = row["offset"]
        return [out[k] for k in sorted(out)]


__all__ = ["LEASES", "ChannelHub", "ChannelMetrics", "Sink", "lease_name"]
