"""The channel handler contract, the registry of handlers by namespace, and the built-in
``tick:`` handler.

A channel is named ``namespace:path`` (``tick:clock``, ``cascade:s1/accounts``). The handler
registered for the namespace decides who may subscribe and what a new subscriber gets first
(:meth:`Handler.subscribe`, the seed's SubscribeStream), and produces the channel's stream
(:meth:`Handler.run`, the seed's RunStream). ``run`` is called on one node of the cluster at a
time, the channel's leader; ``subscribe`` is called on the leader too (other nodes forward it),
so both see the same state.

Handlers register as entry points in the group ``baton.channels`` (the name is the namespace)::

    [project.entry-points."baton.channels"]
    prices = "mypkg.prices:PriceHandler"

or per node in the ``[channels.handlers]`` table of its configuration.
"""

from __future__ import annotations

import abc
import asyncio
import importlib
import re
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any

from baton.clock import SYSTEM, Clock
from baton.errors import BadChannel, ChannelRefused, ConfigError
from baton.store import Store

ENTRY_POINTS = "baton.channels"

#: ``namespace:path``: a lower-case namespace, then a path of URL-safe characters.
NAMESPACE = re.compile(r"^[a-z][a-z0-9_-]{0,31}$")
PATH = re.compile(r"^[A-Za-z0-9._~/=,+@-]{1,200}$")


@dataclass(frozen=True, slots=True)
class Channel:
    """A parsed channel name."""

    namespace: str
    path: str

    @property
    def name(self) -> str:
        return f"{self.namespace}:{self.path}"

    def __str__(self) -> str:
        return self.name


def parse_channel(name: object) -> Channel:
    """Split and check a channel name; :class:`BadChannel` (code 4400) says what is wrong."""
    if not isinstance(name, str):
        raise BadChannel(f"channel must be a string like 'tick:clock', not {type(name).__name__}")
    ns, sep, path = name.partition(":")
    if not sep:
        raise BadChannel(f"malformed channel {name[:80]!r}: expected namespace:path")
    if not NAMESPACE.match(ns):
        raise BadChannel(
            f"malformed channel {name[:80]!r}: the namespace is 1-32 lower-case letters, "
            "digits, '_' or '-', starting with a letter"
        )
    if not PATH.match(path):
        raise BadChannel(
            f"malformed channel {name[:80]!r}: the path is 1-200 of A-Z a-z 0-9 . _ ~ / = , + @ -"
        )
    return Channel(ns, path)


@dataclass(frozen=True, slots=True)
class User:
    """Who subscribes. ``cluster`` is True for the cluster token (nodes and administrators);
    otherwise ``id`` is what the handler of ``namespace`` made of the user's token."""

    id: str
    cluster: bool = False
    namespace: str | None = None


CLUSTER_USER = User("cluster", cluster=True)


@dataclass(slots=True)
class Context:
    """What a handler is given. ``epoch`` is the channel's stream epoch (the lease's fencing
    epoch) on the leader; ``stopping`` is set when the upstream must end (leadership lost or
    given up, the node stopping): a ``run`` that waits on something else should also watch it.
    ``settings`` is the node's ``[channels.settings.<namespace>]`` table."""

    node: str
    channel: Channel
    epoch: int
    store: Store
    settings: Mapping[str, Any] = field(default_factory=dict)
    stopping: asyncio.Event = field(default_factory=asyncio.Event)
    #: The node's clock: a ``run`` that paces itself waits on it (tests give a manual one).
    clock: Clock = SYSTEM


class Handler(abc.ABC):
    """A namespace's handler. One instance per node and namespace; keep per-channel state in
    ``run`` (it is called once per leadership term of a channel)."""

    def authenticate(self, token: str) -> str | None:
        """The user id a per-user ``token`` stands for, or None (the default: only the
        cluster token is accepted). Never log the token."""
        return None

    @abc.abstractmethod
    async def subscribe(self, ctx: Context, user: User, channel: Channel) -> Any:
        """Allow ``user`` to subscribe (raise :class:`~baton.errors.ChannelRefused` with a
        one-line reason otherwise) and return the initial data a new subscriber gets (any
        JSON value). Runs on the channel's leader."""

    @abc.abstractmethod
    def run(self, ctx: Context, channel: Channel) -> AsyncIterator[Any]:
        """The upstream: an async iterator of publications (JSON values). Ending normally
        finishes the channel (subscribers are told, the lease released); raising restarts it at
        once, and subscribers are told of the gap."""

    async def publish(self, ctx: Context, user: User, channel: Channel, data: Any) -> None:
        """A client's publication to the channel: refused unless a handler allows it."""
        raise ChannelRefused(f"channel {channel} does not take publications from clients")


# -- the built-in tick handler ---------------------------------------------------------------


def _options(channel: Channel) -> tuple[str, dict[str, float]]:
    name, *opts = channel.path.split(",")
    out: dict[str, float] = {}
    for opt in opts:
        key, sep, value = opt.partition("=")
        if not sep or key not in TickHandler.OPTIONS:
            raise BadChannel(
                f"channel {channel}: unknown tick option {opt!r}; use "
                + ", ".join(f"{k}=N" for k in TickHandler.OPTIONS)
            )
        try:
            out[key] = float(value)
        except ValueError:
            raise BadChannel(f"channel {channel}: option {key} needs a number") from None
        if not 0 <= out[key] <= 1e6:
            raise BadChannel(f"channel {channel}: option {key}={value} is out of range")
    return name, out


class TickHandler(Handler):
    """``tick:<name>[,every=S][,fail=N][,end=N][,deny=1]``: a small stream for tests and
    demonstrations. Publishes ``{"n": i, "at": unix time}`` every ``every`` seconds (default
    0.1); with ``fail=N`` the upstream raises after N ticks (and is restarted), with ``end=N``
    it finishes cleanly after N, and ``deny=1`` refuses every subscriber. The initial data is
    ``{"tick": name, "every": seconds}``."""

    OPTIONS = ("every", "fail", "end", "deny")

    async def subscribe(self, ctx: Context, user: User, channel: Channel) -> Any:
        name, opts = _options(channel)
        if opts.get("deny"):
            raise ChannelRefused(f"channel {channel} refuses subscribers (deny=1)")
        return {"tick": name, "every": opts.get("every", 0.1)}

    async def run(self, ctx: Context, channel: Channel) -> AsyncIterator[Any]:
        _, opts = _options(channel)
        every = opts.get("every", 0.1) or 0.1
        n = 0
        # On a fixed timeline, so the rate holds when the event loop is busy (a real source
        # does not slow down because its consumers do).
        clock = ctx.clock
        start = clock.monotonic()
        while not ctx.stopping.is_set():
            await clock.sleep(max(0.0, start + (n + 1) * every - clock.monotonic()))
            n += 1
            yield {"n": n, "at": clock.time()}
            if "fail" in opts and n >= opts["fail"]:
                raise RuntimeError(f"tick {channel} failed after {n} ticks (fail option)")
            if "end" in opts and n >= opts["end"]:
                return


# -- the registry ------------------------------------------------------------------------------


def _load(namespace: str, target: str) -> Handler:
    module_name, _, attr = target.partition(":")
    if not module_name or not attr:
        raise ConfigError(f"channel handler {namespace} = {target!r}: expected 'module:Class'")
    try:
        cls = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(
            f"channel handler {namespace} = {target!r} cannot be loaded: {exc}"
        ) from None
    if not (isinstance(cls, type) and issubclass(cls, Handler)):
        raise ConfigError(f"channel handler {namespace} = {target!r} is not a Handler class")
    return cls()


def load_handlers(configured: Mapping[str, str] | None = None) -> dict[str, Handler]:
    """Every handler of this node by namespace: the entry points ``baton.channels`` (the
    built-in ``tick`` and ``cascade`` among them), then the configured ones."""
    handlers: dict[str, Handler] = {"tick": TickHandler()}
    for ep in metadata.entry_points(group=ENTRY_POINTS):
        handlers[ep.name] = _load(ep.name, ep.value)
    for ns, target in (configured or {}).items():
        if not NAMESPACE.match(ns):
            raise ConfigError(f"channels.handlers.{ns}: a namespace is 1-32 of a-z 0-9 _ -")
        handlers[ns] = _load(ns, target)
    return handlers


def handler_for(handlers: Mapping[str, Handler], channel: Channel) -> Handler:
    """The handler of ``channel``'s namespace; :class:`BadChannel` (code 4404) if none."""
    found = handlers.get(channel.namespace)
    if found is None:
        raise BadChannel(
            f"unknown namespace {channel.namespace!r} in channel {channel}: this node serves "
            + ", ".join(sorted(handlers)),
            code=4404,
        )
    return found


__all__ = [
    "CLUSTER_USER",
    "Channel",
    "Context",
    "Handler",
    "TickHandler",
    "User",
    "handler_for",
    "load_handlers",
    "parse_channel",
]
