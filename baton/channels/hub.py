"""``ChannelHub``: the channels of one node. Every node runs one; the node agent serves it on its
WebSocket endpoint.

For each channel some node has subscribers on, the hub is either

* the **leader**: it holds the lease ``channels/<channel>`` (in a :class:`LeaseKeeper`, so all
  its channel leases renew in one store round trip) and runs the handler's upstream; the
  stream's epoch is the lease's epoch; offsets count publications from 1 within the epoch; the
  last ``history`` publications are kept for recovery; or
* a **follower**: it holds one relay connection to the leader's WebSocket endpoint (with the
  cluster token), keeps the same history from it, and forwards each new subscriber's subscribe
  to the leader over HTTP (``POST /v1/channels/subscribe``) for the permission check and the
  initial data.

Safety (seed 000's scenarios):

* A leader publishes only while its lease is inside the renew deadline, and a watchdog stops
  the upstream within a fraction of the stop margin after it is not: the upstream stops before
  the lease can expire at the store (scenario 3).
* Every frame carries its epoch; a node delivers a frame to a subscriber only at the epoch the
  subscriber was given, and never adopts an epoch lower than one it has seen: stale-epoch
  publications never reach a subscriber (scenario 5).
* A forwarded subscribe names the epoch the follower believes; the leader computes the initial
  data, then renews the lease at that epoch in one atomic store call and refuses when it cannot
  (scenario 6); the follower re-reads the lease and tries again, and after ``RETRIES`` answers
  the subscriber with code 4503 (scenario 2).
* Followers read every channel lease in one store call every ``check_interval``; a lease gone
  or at another epoch makes them take the lease or follow the new holder, and give every
  subscriber the new epoch with fresh initial data (scenario 1). A check that fails is
  postponed to the next interval: nothing changes on a failed read (scenario 4).
* An upstream that raises is restarted at once (with a growing pause if it keeps failing
  without publishing) and subscribers get a ``gap`` (scenario 7); one that ends cleanly
  finishes the channel: subscribers get code 4100 and the lease is released (scenario 8).
* The last subscriber leaving anywhere lets the upstream linger, then releases the lease; a
  node stopping hands each channel it leads to a node that relays it, by name.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import logging
import time
from collections.abc import Coroutine, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import httpx
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from baton.backoff import Backoff
from baton.errors import (
    ChannelError,
    ChannelFinished,
    ChannelRefused,
    ChannelUnavailable,
    LossReason,
    StoreError,
)
from baton.keys import node_record
from baton.lease.keeper import LeaseKeeper
from baton.lease.role import Role
from baton.lease.timings import Timings
from baton.logs import describe
from baton.store import Lease, Store

from .config import ChannelsConfig, ChannelTimings
from .handler import (
    CLUSTER_USER,
    Channel,
    Context,
    Handler,
    User,
    handler_for,
    load_handlers,
    parse_channel,
)
from .protocol import CLOSE_GOING_AWAY, Since, dumps

log = logging.getLogger("baton.channels")

#: The lease of a channel.
LEASES = "channels/"
#: Attempts of one subscribe when the leader does not answer or changes meanwhile.
RETRIES = 3
#: The longest pause between restarts of an upstream that keeps failing at once.
MAX_RESTART_PAUSE = 2.0


def lease_name(channel: str) -> str:
    return LEASES + channel


class Sink(Protocol):
    """A subscriber's connection, as the hub sees it (see :mod:`baton.channels.server`)."""

    #: The node a relay connection comes from (None for a client).
    peer: str | None

    def send(self, text: str, ts: float | None = None) -> None:
        """Queue one frame without waiting (a connection too far behind is closed)."""

    def close(self, code: int, reason: str) -> None:
        """Close the connection with ``code`` and a one-line ``reason``."""

    async def wait_closed(self) -> None:
        """Return once the close frame went out (or the connection is gone)."""


@dataclass(slots=True)
class _Sub:
    user: User
    epoch: int
    #: The highest offset this subscriber has been given (or its data covered).
    after: int
    relay: bool = False


@dataclass(slots=True)
class _Stream:
    channel: Channel
    handler: Handler
    role: Role = Role.NONE  # leader, follower, none
    epoch: int = 0
    leader: str | None = None
    offset: int = 0
    max_epoch: int = 0
    history: collections.deque[tuple[int, str, dict[str, Any]]] = field(
        default_factory=collections.deque
    )
    subs: dict[Sink, _Sub] = field(default_factory=dict)
    task: asyncio.Task[None] | None = None
    linger: asyncio.Task[None] | None = None
    ctx: Context | None = None
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    finished: bool = False
    #: Set while the relay is connected (followers).
    relay_up: bool = False

    @property
    def name(self) -> str:
        return self.channel.name

    def clients(self) -> int:
        return sum(1 for s in self.subs.values() if not s.relay)


class ChannelMetrics:
    """The channel metrics of one node (in the node's registry)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        r = registry
        self.upstreams = Gauge(
            "baton_channel_upstreams", "Channel upstreams running on this node", registry=r
        )
        self.subscribers = Gauge(
            "baton_channel_subscribers",
            "Subscriptions served by this node (client: WebSocket clients; relay: other nodes)",
            ["kind"],
            registry=r,
        )
        self.publications = Counter(
            "baton_channel_publications_total",
            "Publications made by upstreams on this node",
            registry=r,
        )
        self.forwarded = Counter(
            "baton_channel_forwarded_subscribes_total",
            "Subscribes this node forwarded to a channel leader, by outcome",
            ["outcome"],
            registry=r,
        )
        self.restarts = Counter(
            "baton_channel_upstream_restarts_total",
            "Upstreams restarted after they failed",
            registry=r,
        )
        self.delivery = Histogram(
            "baton_channel_delivery_seconds",
            "From the upstream yielding a publication to this node writing it to a subscriber",
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5),
            registry=r,
        )


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
    ) -> None:
        self.store = store
        self.node = node
        self._token = token
        self.config = config or ChannelsConfig()
        self.timings: ChannelTimings = self.config.timings(lease_timings)
        self.handlers = load_handlers(self.config.handlers)
        self.metrics = ChannelMetrics(registry or CollectorRegistry())
        self.keeper = LeaseKeeper(store, node, self.timings.lease, on_lost=self._on_lost)
        self.streams: dict[str, _Stream] = {}
        self._addresses: dict[str, str] = {}
        self._listen_host = listen_host
        self._http: httpx.AsyncClient | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._surveys: dict[tuple[str, User, int], asyncio.Future[dict[str, Any]]] = {}
        #: Set when this node starts leading a channel (wakes the watchdog).
        self._leading = asyncio.Event()
        self._loops: list[asyncio.Task[None]] = []
        self._stopping = False
        #: Every open connection (subscribed or not), closed with 1001 at a stop.
        self._sinks: set[Sink] = set()

    # -- lifecycle ------------------------------------------------------------------------

    async def start(self) -> None:
        transport = httpx.AsyncHTTPTransport(local_address=_local(self._listen_host))
        self._http = httpx.AsyncClient(
            transport=transport,
            timeout=self.timings.forward_timeout,
            headers={"authorization": f"Bearer {self._token}"},
        )
        await self.keeper.start()
        self._loops = [
            asyncio.create_task(self._check_loop(), name="channels-check"),
            asyncio.create_task(self._watchdog(), name="channels-watchdog"),
        ]

    async def stop(self) -> None:
        """Hand every channel this node leads to a node that relays it (by name), close every
        relay and connection, release the rest."""
        self._stopping = True
        for task in self._loops:
            task.cancel()
        for stream in list(self.streams.values()):
            with contextlib.suppress(Exception):
                async with asyncio.timeout(self.timings.lease.request_timeout * 4):
                    await self._stop_stream(stream, handover=True)
        for task in list(self._tasks):
            task.cancel()
        await self.keeper.stop()
        if self._http is not None:
            await self._http.aclose()

    async def hand_over(self) -> None:
        """The first step of a clean stop: hand each channel this node leads to a node that
        relays it, by name (the lease is reserved for it), and accept no more subscribers."""
        self._stopping = True
        for stream in list(self.streams.values()):
            if stream.role == Role.LEADER:
                with contextlib.suppress(Exception):
                    async with asyncio.timeout(self.timings.lease.request_timeout * 4):
                        await self._stop_stream(stream, handover=True)

    def _spawn(self, coro: Coroutine[Any, Any, None], name: str) -> asyncio.Task[None]:
        task = asyncio.ensure_future(coro)
        task.set_name(name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

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
            stream = self.streams[channel.name] = _Stream(channel, handler)
        self._cancel_linger(stream)
        # A placeholder while the subscribe runs, so that no linger releases the channel.
        stream.subs[sink] = _Sub(user, 0, 0)
        try:
            await self._subscribe(stream, sink, user, since)
        except BaseException:
            if stream.subs.get(sink) is not None and stream.subs[sink].epoch == 0:
                del stream.subs[sink]
                self._maybe_linger(stream)
            raise
        self._count()

    async def _subscribe(
        self, stream: _Stream, sink: Sink, user: User, since: Since | None
    ) -> None:
        last: ChannelError | None = None
        for attempt in range(RETRIES):
            if attempt:
                await asyncio.sleep(min(self.timings.forward_timeout, 0.1 * 2**attempt))
            await self._ensure(stream)
            if stream.epoch == 0:
                last = ChannelUnavailable(
                    f"channel {stream.name} has no reachable leader now: subscribe again"
                )
                continue
            epoch = stream.epoch
            if since is not None and self._recover(stream, sink, user, since):
                return
            after = since.offset if since is not None and since.epoch == epoch else None
            try:
                answer = await self._initial(stream, user, epoch, after)
            except ChannelUnavailable as exc:
                last = exc
                await self._recheck(stream)
                continue
            if stream.epoch != epoch:  # changed while we asked
                continue
            self._attach(stream, sink, user, epoch, answer)
            return
        assert last is not None
        raise last

    def _recover(self, stream: _Stream, sink: Sink, user: User, since: Since) -> bool:
        """Resume ``sink`` after ``since`` from the history, if it covers it."""
        if since.epoch != stream.epoch or since.offset > stream.offset:
            return False
        oldest = stream.history[0][0] if stream.history else stream.offset + 1
        if since.offset + 1 < oldest:
            return False
        stream.subs[sink] = _Sub(user, stream.epoch, stream.offset)
        # The subscriber's own offset, as a leader's recovered answer gives it: the missed
        # publications follow, so naming the newest offset here would make a client drop
        # them all as already seen.
        sink.send(self._subscribed(stream, since.offset, None, recovered=True))
        for offset, text, frame in stream.history:
            if offset > since.offset:
                sink.send(text, frame.get("ts"))
        return True

    def _subscribed(self, stream: _Stream, offset: int, data: Any, recovered: bool) -> str:
        return dumps(
            {
                "type": "subscribed",
                "channel": stream.name,
                "epoch": stream.epoch,
                "offset": offset,
                "recovered": recovered,
                "data": data,
            }
        )

    def _attach(
        self, stream: _Stream, sink: Sink, user: User, epoch: int, answer: dict[str, Any]
    ) -> None:
        """Start ``sink`` from a survey's ``answer``: fresh data at the leader's offset, or
        (recovered) the frames the leader had after the subscriber's offset."""
        offset = int(answer["offset"])
        recovered = bool(answer.get("recovered"))
        sub = stream.subs[sink] = _Sub(user, epoch, offset)
        sink.send(self._subscribed(stream, offset, answer.get("data"), recovered=recovered))
        for text in answer.get("frames", ()):
            frame = json.loads(text)
            if frame.get("epoch") == epoch and int(frame["offset"]) > sub.after:
                sub.after = int(frame["offset"])
                sink.send(text, frame.get("ts"))
        # What this node already has beyond that.
        for off, text, frame in stream.history:
            if off > sub.after:
                sink.send(text, frame.get("ts"))
                sub.after = off

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
        if since is not None and self._recover(stream, sink, CLUSTER_USER, since):
            stream.subs[sink].relay = True
        else:
            stream.subs[sink] = _Sub(CLUSTER_USER, epoch, stream.offset, relay=True)
            sink.send(self._subscribed(stream, stream.offset, None, recovered=False))
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
        self._stopping = True
        sinks = list(self._sinks)
        for sink in sinks:
            sink.close(CLOSE_GOING_AWAY, f"node {self.node} is stopping: reconnect to another node")
        if sinks:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await asyncio.gather(*(s.wait_closed() for s in sinks))

    def drop(self, sink: Sink) -> None:
        """A connection closed: forget its subscriptions."""
        self._sinks.discard(sink)
        for stream in list(self.streams.values()):
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
            ctx = Context(self.node, channel, 0, self.store, self._settings(channel))
        await handler.publish(ctx, user, channel, data)

    def _count(self) -> None:
        clients = relays = 0
        for stream in self.streams.values():
            for sub in stream.subs.values():
                if sub.epoch == 0:
                    continue
                if sub.relay:
                    relays += 1
                else:
                    clients += 1
        self.metrics.subscribers.labels(kind="client").set(clients)
        self.metrics.subscribers.labels(kind="relay").set(relays)

    # -- the survey: initial data at the leader --------------------------------------------

    async def _initial(
        self, stream: _Stream, user: User, epoch: int, since: int | None = None
    ) -> dict[str, Any]:
        if stream.role == Role.LEADER:
            return await self.survey(stream.name, user, epoch)
        if since is not None:
            return await self._forwarded(stream, user, epoch, since)
        # One survey in flight per channel, user and epoch: a burst of subscribers at this node
        # (a reconnect wave, a new epoch) costs the leader one request, and they get the same
        # data, as they would have a moment apart.
        key = (stream.name, user, epoch)
        shared = self._surveys.get(key)
        if shared is None:
            shared = asyncio.ensure_future(self._forwarded(stream, user, epoch, None))
            self._surveys[key] = shared
            shared.add_done_callback(lambda _: self._surveys.pop(key, None))
        return await asyncio.shield(shared)

    async def _forwarded(
        self, stream: _Stream, user: User, epoch: int, since: int | None
    ) -> dict[str, Any]:
        assert stream.leader is not None
        try:
            answer = await self._forward(stream.leader, stream.name, user, epoch, since)
        except ChannelUnavailable:
            self.metrics.forwarded.labels(outcome="unavailable").inc()
            raise
        except ChannelError:
            self.metrics.forwarded.labels(outcome="refused").inc()
            raise
        self.metrics.forwarded.labels(outcome="ok").inc()
        return answer

    async def survey(
        self, channel_name: str, user: User, epoch: int, since: int | None = None
    ) -> dict[str, Any]:
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
        if since is not None and since <= offset:
            oldest = stream.history[0][0] if stream.history else offset + 1
            if since + 1 >= oldest:
                frames = [text for off, text, _ in stream.history if off > since]
                return {"epoch": epoch, "offset": since, "recovered": True, "frames": frames}
        assert stream.ctx is not None
        data = await stream.handler.subscribe(stream.ctx, user, stream.channel)
        try:
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
        return {"epoch": epoch, "offset": offset, "data": data}

    async def _address(self, node: str) -> str:
        address = self._addresses.get(node)
        if address is None:
            rec = await self.store.get(node_record(node))
            if rec is None:
                raise ChannelUnavailable(f"leader {node} has no node record: is it running?")
            address = self._addresses[node] = str(json.loads(rec.value)["address"])
        return address

    async def _forward(
        self, node: str, channel: str, user: User, epoch: int, since: int | None
    ) -> dict[str, Any]:
        assert self._http is not None
        body = {
            "channel": channel,
            "epoch": epoch,
            "since": since,
            "user": user.id,
            "cluster": user.cluster,
            "namespace": user.namespace,
        }
        try:
            address = await self._address(node)
            res = await self._http.post(f"http://{address}/v1/channels/subscribe", json=body)
            answer = res.json()
        except (httpx.HTTPError, ValueError, StoreError) as exc:
            self._addresses.pop(node, None)
            raise ChannelUnavailable(
                f"leader {node} of {channel} did not answer ({type(exc).__name__}): subscribe again"
            ) from None
        if res.status_code != 200 or not isinstance(answer, dict):
            raise ChannelUnavailable(f"leader {node} of {channel} answered {res.status_code}")
        if not answer.get("ok"):
            code = int(answer.get("code", ChannelUnavailable.code))
            raise ChannelError.from_code(code, str(answer.get("reason", "refused")))
        return answer

    # -- leadership -----------------------------------------------------------------------

    async def _ensure(self, stream: _Stream) -> None:
        """Make sure this node leads ``stream`` or follows its leader (under the stream's
        lock); leaves ``epoch`` 0 when that cannot be decided now."""
        if stream.epoch and (stream.role == Role.LEADER or stream.task is not None):
            return
        await self._recheck(stream)

    async def _recheck(self, stream: _Stream, lease_now: Lease | bool | None = False) -> None:
        async with stream.lock:
            if stream.finished or self._stopping:
                return
            try:
                async with asyncio.timeout(self.timings.lease.request_timeout * 2):
                    if lease_now is False:
                        current = await self.store.get_lease(lease_name(stream.name))
                    else:
                        assert not isinstance(lease_now, bool)
                        current = lease_now
                    if current is None and stream.subs:
                        await self._drop_lease(stream.name)
                        current = await self.keeper.add(lease_name(stream.name))
                        if current is None:
                            current = await self.store.get_lease(lease_name(stream.name))
            except (StoreError, TimeoutError) as exc:
                # Scenario 4: cannot check now; decide at the next interval.
                log.warning(
                    "channel lease check postponed",
                    extra={"channel": stream.name, "error": describe(exc)},
                )
                return
            if current is None:
                return  # free, but nobody here wants it (or reserved for another node)
            if current.epoch == stream.epoch and current.holder == (
                self.node if stream.role == Role.LEADER else stream.leader
            ):
                if stream.role == Role.FOLLOWER and (stream.task is None or stream.task.done()):
                    self._follow(stream, current)
                return
            if current.epoch < stream.max_epoch:
                return  # an older lease read late: never go back
            if current.holder == self.node and self.keeper.get(current.name) is None:
                return  # our previous incarnation's lease: wait for it to expire
            await self._change_epoch(stream, current)

    async def _change_epoch(self, stream: _Stream, lease: Lease) -> None:
        """Move ``stream`` to ``lease``'s epoch: lead it or follow its holder, and give every
        subscriber here the new epoch with fresh initial data."""
        await self._halt(stream, "leadership moved")
        stream.epoch = lease.epoch
        stream.max_epoch = max(stream.max_epoch, lease.epoch)
        stream.offset = 0
        stream.history.clear()
        stream.leader = lease.holder
        if lease.holder == self.node:
            self._lead(stream, lease)
        else:
            self._follow(stream, lease)
        log.info(
            "channel epoch",
            extra={"channel": stream.name, "epoch": lease.epoch, "leader": lease.holder},
        )
        waiting = [(s, sub) for s, sub in stream.subs.items() if sub.epoch != 0]
        if waiting:
            self._spawn(self._resubscribe(stream, waiting), f"resubscribe:{stream.name}")

    async def _resubscribe(self, stream: _Stream, subs: list[tuple[Sink, _Sub]]) -> None:
        """Give subscribers of an older epoch the current one, with fresh data (one survey per
        user: they get the same data)."""
        epoch = stream.epoch
        answers: dict[User, dict[str, Any] | ChannelError] = {}
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
                sink.send(_unsubscribed(stream.name, answer.code, answer.reason))
                continue
            self._attach(stream, sink, sub.user, epoch, answer)
        self._maybe_linger(stream)
        self._count()

    def _lead(self, stream: _Stream, lease: Lease) -> None:
        stream.role = Role.LEADER
        self._leading.set()
        stream.ctx = Context(
            self.node, stream.channel, lease.epoch, self.store, self._settings(stream.channel)
        )
        stream.task = asyncio.create_task(
            self._upstream(stream, stream.ctx), name=f"upstream:{stream.name}"
        )
        self.metrics.upstreams.inc()

    def _follow(self, stream: _Stream, lease: Lease) -> None:
        stream.role = Role.FOLLOWER
        stream.ctx = None
        stream.task = asyncio.create_task(
            self._relay(stream, lease.holder, lease.epoch), name=f"relay:{stream.name}"
        )

    def _settings(self, channel: Channel) -> Mapping[str, Any]:
        return self.config.settings.get(channel.namespace, {})

    async def _halt(self, stream: _Stream, why: str, notify: bool = True) -> None:
        """Stop the upstream or relay of ``stream``; ``notify``: tell the relays that follow
        it (else call :meth:`_notify_relays` once the lease is dealt with)."""
        task, stream.task = stream.task, None
        was_leader, stream.role = stream.role == Role.LEADER, Role.NONE
        stream.relay_up = False
        if stream.ctx is not None:
            stream.ctx.stopping.set()
        if was_leader:
            self.metrics.upstreams.dec()
        if task is not None and task is not asyncio.current_task():
            task.cancel()
            if was_leader:
                # The upstream must have stopped before the lease can be given up.
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
            else:
                # A relay only reads: no need to wait for its connection to close.
                await asyncio.wait({task}, timeout=self.timings.forward_timeout)
        if was_leader and notify:
            self._notify_relays(stream, why)

    def _notify_relays(self, stream: _Stream, why: str) -> None:
        for sink, sub in list(stream.subs.items()):
            if sub.relay:
                del stream.subs[sink]
                sink.send(_unsubscribed(stream.name, ChannelUnavailable.code, why))

    async def _drop_lease(self, name: str) -> None:
        if name in self.keeper.names():
            with contextlib.suppress(StoreError, TimeoutError):
                async with asyncio.timeout(self.timings.lease.request_timeout):
                    await self.keeper.remove(name)

    def _on_lost(self, name: str, reason: LossReason) -> None:
        stream = self.streams.get(name.removeprefix(LEASES))
        if stream is not None and stream.role == Role.LEADER and not stream.finished:
            log.warning("channel leadership lost", extra={"channel": stream.name, "reason": reason})
            self._spawn(self._lost(stream), f"lost:{stream.name}")

    async def _lost(self, stream: _Stream) -> None:
        if stream.role != Role.LEADER:
            return
        await self._halt(stream, f"{self.node} lost the leadership of {stream.name}")
        stream.epoch = 0  # re-decided at once: someone else leads, or we take it again
        await self._drop_lease(lease_name(stream.name))
        await self._recheck(stream)

    async def _watchdog(self) -> None:
        """Stop every upstream whose lease is past its renew deadline (the keeper only notices
        at its next renewal)."""
        while True:
            # An idle node (leading no channel) does not wake ten times a second for nothing.
            self._leading.clear()
            if not any(s.role == Role.LEADER for s in self.streams.values()):
                await self._leading.wait()
            await asyncio.sleep(self.timings.watchdog)
            for stream in list(self.streams.values()):
                ctx = stream.ctx
                if (
                    stream.role == Role.LEADER
                    and self.keeper.get(lease_name(stream.name)) is None
                    and ctx is not None
                    and not ctx.stopping.is_set()
                ):
                    ctx.stopping.set()
                    self._spawn(self._lost(stream), f"lost:{stream.name}")

    async def _check_loop(self) -> None:
        """Scenario 1 and 4: every interval, read every channel lease in one call and move the
        channels whose lease is gone or at another epoch; a failed read changes nothing."""
        while True:
            await asyncio.sleep(self.timings.check_interval)
            watched = [s for s in self.streams.values() if s.role != Role.LEADER and s.subs]
            if not watched:
                continue
            try:
                async with asyncio.timeout(self.timings.lease.request_timeout * 2):
                    held = {x.name: x for x in await self.store.list_leases(LEASES)}
            except (StoreError, TimeoutError) as exc:
                log.warning("channel check postponed", extra={"error": describe(exc)})
                continue
            for stream in watched:
                lease = held.get(lease_name(stream.name))
                if lease is None or lease.epoch != stream.epoch or not stream.relay_up:
                    self._spawn(self._recheck(stream, lease), f"recheck:{stream.name}")

    # -- the upstream (leader) ------------------------------------------------------------

    async def _upstream(self, stream: _Stream, ctx: Context) -> None:
        pause = 0.0
        while not ctx.stopping.is_set():
            published = False
            try:
                async for data in stream.handler.run(ctx, stream.channel):
                    if not self._emit(stream, ctx, "pub", {"data": data, "ts": time.time()}):
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
                if not self._emit(stream, ctx, "gap", {"reason": reason}):
                    return
                pause = 0.0 if published else min(MAX_RESTART_PAUSE, max(0.05, pause * 2))
                await asyncio.sleep(pause)
                continue
            if not ctx.stopping.is_set():
                self._spawn(self._finish(stream, ctx), f"finish:{stream.name}")
            return

    def _emit(self, stream: _Stream, ctx: Context, kind: str, extra: dict[str, Any]) -> bool:
        """Publish one frame of the leader's stream; False (and nothing sent) when the lease
        is no longer held inside its deadline at the stream's epoch."""
        lease = self.keeper.get(lease_name(stream.name))
        if lease is None or lease.epoch != ctx.epoch or stream.epoch != ctx.epoch:
            ctx.stopping.set()
            return False
        stream.offset += 1
        frame = {"type": kind, "channel": stream.name, "epoch": ctx.epoch, "offset": stream.offset}
        frame.update(extra)
        self._deliver(stream, frame, dumps(frame))
        return True

    def _deliver(self, stream: _Stream, frame: dict[str, Any], text: str) -> None:
        offset = int(frame["offset"])
        stream.history.append((offset, text, frame))
        while len(stream.history) > self.config.history:
            stream.history.popleft()
        ts = frame.get("ts")
        for sink, sub in list(stream.subs.items()):
            # The fence: only the epoch this subscriber was given, and only forward.
            if sub.epoch == frame["epoch"] and offset > sub.after:
                sub.after = offset
                sink.send(text, ts)

    async def _finish(self, stream: _Stream, ctx: Context) -> None:
        """Scenario 8: the upstream ended cleanly; tell everyone, release the lease."""
        stream.finished = True
        reason = f"channel {stream.name} finished at epoch {ctx.epoch}, offset {stream.offset}"
        text = _unsubscribed(stream.name, ChannelFinished.code, reason)
        subs, stream.subs = stream.subs, {}
        for sink in subs:
            sink.send(text)
        await self._halt(stream, reason)
        await self._drop_lease(lease_name(stream.name))
        if self.streams.get(stream.name) is stream:
            del self.streams[stream.name]
        self._count()

    # -- the relay (follower) -------------------------------------------------------------

    async def _relay(self, stream: _Stream, leader: str, epoch: int) -> None:
        """Follow ``leader``'s stream at ``epoch`` until it ends; then let the check decide."""
        from websockets.asyncio.client import connect
        from websockets.exceptions import WebSocketException

        backoff = Backoff(0.05, max(0.05, self.timings.check_interval))
        while stream.epoch == epoch and not self._stopping:
            try:
                address = await self._address(leader)
                async with connect(
                    f"ws://{address}/v1/channels/ws",
                    additional_headers={"authorization": f"Bearer {self._token}"},
                    open_timeout=self.timings.forward_timeout,
                    # Leaving a leader that hangs (paused, cut off) must not wait for its
                    # closing handshake: 10 s by default, during which this node would
                    # neither lead nor follow the channel's new epoch.
                    close_timeout=self.timings.forward_timeout,
                    max_size=16 * 1024 * 1024,
                    local_addr=(h, 0) if (h := _local(self._listen_host)) else None,
                ) as ws:
                    request: dict[str, Any] = {
                        "type": "subscribe",
                        "channel": stream.name,
                        "relay": epoch,
                        "node": self.node,
                    }
                    if stream.offset:
                        request["since"] = {"epoch": epoch, "offset": stream.offset}
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
                self._addresses.pop(leader, None)
            stream.relay_up = False
            if stream.epoch != epoch:
                return
            # The leader may be gone: look at the lease now rather than at the next interval.
            delay = backoff.next()
            self._spawn(self._check_after(stream, epoch, delay), f"check:{stream.name}")
            await asyncio.sleep(delay)

    async def _check_after(self, stream: _Stream, epoch: int, delay: float) -> None:
        await asyncio.sleep(delay)
        if stream.epoch == epoch:
            try:
                async with asyncio.timeout(self.timings.lease.request_timeout * 2):
                    lease = await self.store.get_lease(lease_name(stream.name))
            except (StoreError, TimeoutError):
                return  # scenario 4: decided at the next check
            if lease is None or lease.epoch != epoch:
                await self._recheck(stream, lease)

    def _relayed(self, stream: _Stream, epoch: int, raw: str) -> bool:
        """One frame from the leader; True when the relay must end."""
        frame = json.loads(raw)
        kind = frame.get("type")
        if frame.get("epoch", epoch) != epoch or stream.epoch != epoch:
            return True  # the fence: never pass on another epoch's frames
        if kind == "subscribed":
            stream.relay_up = True
            offset = int(frame["offset"])
            if not frame.get("recovered") and offset > stream.offset and stream.offset:
                gap = {
                    "type": "gap",
                    "channel": stream.name,
                    "epoch": epoch,
                    "offset": offset,
                    "reason": "this node's relay fell behind the leader's history",
                }
                self._deliver(stream, gap, dumps(gap))
            stream.offset = max(stream.offset, offset)
            return False
        if kind in ("pub", "gap"):
            offset = int(frame["offset"])
            if offset <= stream.offset:
                return False
            stream.offset = offset
            self._deliver(stream, frame, raw)
            return False
        if kind == "unsubscribed":
            if frame.get("code") == ChannelFinished.code:
                self._spawn(self._finished_here(stream, str(frame.get("reason"))), "finished")
            else:
                self._spawn(self._check_after(stream, epoch, 0), f"check:{stream.name}")
            return True
        return False

    async def _finished_here(self, stream: _Stream, reason: str) -> None:
        stream.finished = True
        text = _unsubscribed(stream.name, ChannelFinished.code, reason)
        subs, stream.subs = stream.subs, {}
        for sink in subs:
            sink.send(text)
        await self._halt(stream, reason)
        if self.streams.get(stream.name) is stream:
            del self.streams[stream.name]
        self._count()

    # -- linger and stop ------------------------------------------------------------------

    def _cancel_linger(self, stream: _Stream) -> None:
        if stream.linger is not None:
            stream.linger.cancel()
            stream.linger = None

    def _maybe_linger(self, stream: _Stream) -> None:
        if stream.subs or stream.linger is not None or stream.finished:
            return
        stream.linger = self._spawn(self._linger(stream), f"linger:{stream.name}")

    async def _linger(self, stream: _Stream) -> None:
        await asyncio.sleep(self.timings.linger)
        stream.linger = None
        if not stream.subs and self.streams.get(stream.name) is stream:
            await self._stop_stream(stream, handover=False)

    async def _stop_stream(self, stream: _Stream, handover: bool) -> None:
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
        await self._halt(stream, "", notify=False)
        if lease is not None:
            with contextlib.suppress(StoreError, TimeoutError):
                async with asyncio.timeout(self.timings.lease.request_timeout):
                    await self.store.release(lease, successor=successor)
            await self._drop_lease(lease.name)
        self._notify_relays(
            stream,
            f"{self.node} handed {stream.name} over to {successor}" if successor else "stopped",
        )
        for sink, sub in list(stream.subs.items()):
            if not sub.relay:
                sink.close(1001, f"node {self.node} is stopping: reconnect to another node")
        stream.subs.clear()
        if self.streams.get(stream.name) is stream:
            del self.streams[stream.name]
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
                "relays": sum(1 for x in s.subs.values() if x.relay),
            }
            for s in sorted(self.streams.values(), key=lambda x: x.name)
        ]

    async def cluster_view(self) -> list[dict[str, Any]]:
        """Every channel of the cluster: leader and epoch from the store, offset from its
        leader, subscribers per node (from every node that answers)."""
        assert self._http is not None
        leases = await self.store.list_leases(LEASES)
        records, _ = await self.store.list("nodes/")
        views: dict[str, list[dict[str, Any]]] = {self.node: self.view()}

        async def ask(node: str, address: str) -> None:
            assert self._http is not None
            try:
                res = await self._http.get(f"http://{address}/v1/channels")
                views[node] = res.json()["channels"]
            except (httpx.HTTPError, ValueError, KeyError, TypeError):
                views[node] = []

        await asyncio.gather(
            *(
                ask(r.key.removeprefix("nodes/"), json.loads(r.value)["address"])
                for r in records
                if r.key.removeprefix("nodes/") != self.node
            )
        )
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


def _unsubscribed(channel: str, code: int, reason: str) -> str:
    return dumps({"type": "unsubscribed", "channel": channel, "code": code, "reason": reason})


def _local(host: str | None) -> str | None:
    import ipaddress

    if not host:
        return None
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return None
    return None if ip.is_unspecified else str(ip)


__all__ = ["LEASES", "ChannelHub", "ChannelMetrics", "Sink", "lease_name"]
