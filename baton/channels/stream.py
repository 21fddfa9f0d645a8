"""A node's view of one channel's stream: who subscribes here, at which epoch, and the recent
history; the epoch fence that keeps every frame at the epoch its subscriber was given; and the
registry of a node's streams.

The fence (seed 000's scenario 5): a subscriber is given one epoch and receives only that
epoch's publications, each once and in order (``offset`` only grows); a stream never goes back
to an epoch lower than one it has seen (``max_epoch``). The history keeps the last
publications of the current epoch, so a subscriber that comes back with ``since`` inside it
recovers what it missed instead of starting over.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Coroutine, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from baton.lease.role import Role

from .handler import Channel, Context, Handler, User
from .protocol import Pub, Publication, Since, Subscribed, Unsubscribed, dumps

#: The lease of a channel.
LEASES = "channels/"


def lease_name(channel: str) -> str:
    """The lease a channel's leader holds (``channels/<channel>``)."""
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
class Sub:
    """One subscription at this node. ``epoch`` 0: a subscribe still running (a placeholder
    that keeps the channel from lingering)."""

    user: User
    epoch: int
    #: The highest offset this subscriber has been given (or its data covered).
    after: int
    relay: bool = False


@dataclass(slots=True)
class Entry:
    """One publication in the history: its frame and the exact text that was sent."""

    offset: int
    text: str
    ts: float | None


@dataclass(slots=True)
class Stream:
    """One channel at this node: its role, epoch and leader, its subscribers and history."""

    channel: Channel
    handler: Handler
    #: The most publications kept for recovery.
    keep: int
    role: Role = Role.NONE
    epoch: int = 0
    leader: str | None = None
    offset: int = 0
    max_epoch: int = 0
    history: collections.deque[Entry] = field(default_factory=collections.deque)
    subs: dict[Sink, Sub] = field(default_factory=dict)
    #: The upstream (leader) or the relay (follower).
    task: asyncio.Task[None] | None = None
    linger: asyncio.Task[None] | None = None
    ctx: Context | None = None
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    finished: bool = False
    #: Set while the relay is connected (followers).
    relay_up: bool = False
    #: True once the relay had the leader's first answer at this epoch (followers): from then
    #: on this node's history runs on from that offset without a hole (a reconnect recovers,
    #: or says ``gap``), so a subscriber started from the leader's answer can take the rest
    #: from it.
    relayed: bool = False
    #: Subscribes waiting for the relay's next news: None (it started) or why it failed.
    relay_waiters: list[asyncio.Future[str | None]] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.channel.name

    def clients(self) -> int:
        return sum(1 for s in self.subs.values() if not s.relay)

    def relays(self) -> int:
        return sum(1 for s in self.subs.values() if s.relay)

    def new_epoch(self, epoch: int, leader: str) -> None:
        """Start ``leader``'s stream at ``epoch``: offsets count from 1 again."""
        self.epoch = epoch
        self.max_epoch = max(self.max_epoch, epoch)
        self.offset = 0
        self.history.clear()
        self.leader = leader
        self.relayed = False

    def relay_news(self, error: str | None) -> None:
        """The relay started (``error`` None: ``relayed`` from now on) or an attempt failed
        (why): wake the subscribes waiting for it."""
        if error is None:
            self.relayed = True
        waiters, self.relay_waiters = self.relay_waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(error)

    def deliver(self, frame: Publication, text: str) -> None:
        """Keep ``frame`` (sent as ``text``) in the history and give it to every subscriber
        of its epoch that does not have it yet."""
        ts = frame.ts if isinstance(frame, Pub) else None
        self.history.append(Entry(frame.offset, text, ts))
        while len(self.history) > self.keep:
            self.history.popleft()
        subs = list(self.subs.items())
        # Relays first: each carries the frame to a whole node, whose own fan-out then runs
        # beside this one instead of after it.
        for relay in (True, False):
            for sink, sub in subs:
                # The fence: only the epoch this subscriber was given, and only forward.
                if sub.relay is relay and sub.epoch == frame.epoch and frame.offset > sub.after:
                    sub.after = frame.offset
                    sink.send(text, ts)

    def since(self, offset: int) -> list[Entry] | None:
        """The history after ``offset`` of the current epoch, or None when it does not cover
        it (too old, or ahead of the stream)."""
        if offset > self.offset:
            return None
        oldest = self.history[0].offset if self.history else self.offset + 1
        if offset + 1 < oldest:
            return None
        return [e for e in self.history if e.offset > offset]

    def recover(self, sink: Sink, user: User, since: Since) -> bool:
        """Resume ``sink`` after ``since`` from the history, if it covers it."""
        missed = self.since(since.offset) if since.epoch == self.epoch else None
        if missed is None:
            return False
        self.subs[sink] = Sub(user, self.epoch, self.offset)
        # The subscriber's own offset, as a leader's recovered answer gives it: the missed
        # publications follow, so naming the newest offset here would make a client drop
        # them all as already seen.
        sink.send(self.subscribed(since.offset, None, recovered=True))
        for entry in missed:
            sink.send(entry.text, entry.ts)
        return True

    def subscribed(self, offset: int, data: Any, recovered: bool) -> str:
        return dumps(
            Subscribed(
                channel=self.name,
                epoch=self.epoch,
                offset=offset,
                recovered=recovered,
                data=data,
            )
        )

    def unsubscribed(self, code: int, reason: str) -> str:
        return dumps(Unsubscribed(channel=self.name, code=code, reason=reason))


class Registry:
    """A node's streams by channel name, and whether the node is stopping."""

    def __init__(self) -> None:
        self.streams: dict[str, Stream] = {}
        self.stopping = False

    def get(self, name: str) -> Stream | None:
        return self.streams.get(name)

    def __iter__(self) -> Iterator[Stream]:
        return iter(list(self.streams.values()))

    def remove(self, stream: Stream) -> None:
        """Forget ``stream`` (unless a newer one of its channel replaced it already)."""
        if self.streams.get(stream.name) is stream:
            del self.streams[stream.name]


class Tasks:
    """The background tasks of a node's channels, cancelled together at a stop."""

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[None]] = set()

    def spawn(self, coro: Coroutine[Any, Any, None], name: str) -> asyncio.Task[None]:
        task = asyncio.ensure_future(coro)
        task.set_name(name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def cancel(self) -> None:
        for task in list(self._tasks):
            task.cancel()


__all__ = ["LEASES", "Entry", "Registry", "Sink", "Stream", "Sub", "Tasks", "lease_name"]
