"""Channel subscribers for tests and benchmarks: a :class:`~baton.channels.Client`
subscription running in a thread of its own, so that a synchronous test can drive node
processes and wait for what the subscriber received (``wait_for``)::

    with Subscriber([c.node("n1").url], c.token, "tick:clock") as sub:
        wait_for(lambda: len(sub.pubs()) >= 3)
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self

from baton.channels.client import Client, Message
from baton.channels.handler import Channel, Context, Handler, User
from baton.lease.role import Role
from baton.local.waiting import await_for

if TYPE_CHECKING:
    from baton.local.cluster import LocalCluster


class Subscriber:
    """Subscribes to ``channel`` through ``urls`` until stopped; every message is appended to
    :attr:`messages`; an error that ended the subscription is kept in :attr:`error`."""

    def __init__(self, urls: Sequence[str], token: str, channel: str) -> None:
        self.urls = list(urls)
        self.token = token
        self.channel = channel
        self.messages: list[Message] = []
        self.error: BaseException | None = None
        self.finished = threading.Event()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._main, daemon=True, name=f"sub:{channel}")
        self._task: asyncio.Task[None] | None = None
        self.client: Client | None = None

    def start(self) -> Self:
        self._thread.start()
        return self

    def _main(self) -> None:
        self._loop.run_until_complete(self._run())

    async def _run(self) -> None:
        self._task = asyncio.current_task()
        try:
            async with Client(self.urls, self.token, reconnect_delay=0.05) as client:
                self.client = client
                async for msg in client.subscribe(self.channel):
                    self.messages.append(msg)
        except asyncio.CancelledError:
            pass
        except BaseException as exc:
            self.error = exc
        finally:
            self.finished.set()

    def stop(self) -> None:
        if self._thread.is_alive():
            task = self._task
            if task is not None:
                self._loop.call_soon_threadsafe(task.cancel)
            self._thread.join(10)

    # -- views of what arrived ----------------------------------------------------------------

    def pubs(self, epoch: int | None = None) -> list[Message]:
        return [
            m
            for m in list(self.messages)
            if m.kind == "pub" and (epoch is None or m.epoch == epoch)
        ]

    def kinds(self, kind: str) -> list[Message]:
        return [m for m in list(self.messages) if m.kind == kind]

    def epoch(self) -> int:
        """The epoch of the last message (0 before the first)."""
        msgs = list(self.messages)
        return msgs[-1].epoch if msgs else 0

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def channel_views(cluster: LocalCluster) -> dict[str, list[dict[str, Any]]]:
    """``GET /v1/channels`` of every running node of ``cluster`` that answers."""
    import httpx

    out = {}
    for node in cluster.nodes.values():
        if not node.running:
            continue
        try:
            res = node.get("/v1/channels")
        except httpx.HTTPError:
            continue
        if res.status_code == 200:
            out[node.id] = res.json()["channels"]
    return out


def channel_leaders(cluster: LocalCluster, channel: str) -> list[tuple[str, int]]:
    """(node, epoch) of every running node that runs ``channel``'s upstream."""
    return [
        (node, row["epoch"])
        for node, rows in channel_views(cluster).items()
        for row in rows
        if row["channel"] == channel and row["role"] == Role.LEADER
    ]


class GatedHandler(Handler):
    """A channel namespace for tests of the subscribe path (load it with ``[channels.handlers]``
    as ``"baton.testing.channels:GatedHandler"``). A subscribe holds its initial data until the
    file ``settings["gate"]`` exists, after writing ``<gate>.waiting`` (so a test knows a
    subscribe is inside the handler, and can change the world before it answers); the
    upstream publishes ``{"n": i}`` every 0.1 s."""

    async def subscribe(self, ctx: Context, user: User, channel: Channel) -> Any:
        gate = Path(str(ctx.settings["gate"]))
        gate.with_name(gate.name + ".waiting").write_text(ctx.node)
        await await_for(gate.exists, timeout=60, what=f"the gate {gate}")
        return {"gated": channel.path}

    async def run(self, ctx: Context, channel: Channel) -> AsyncIterator[Any]:
        n = 0
        while not ctx.stopping.is_set():
            await asyncio.sleep(0.1)
            n += 1
            yield {"n": n}


__all__ = ["GatedHandler", "Subscriber", "channel_leaders", "channel_views"]
