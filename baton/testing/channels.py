"""Channel subscribers for tests and benchmarks: a :class:`~baton.channels.Client`
subscription running in a thread of its own, so that a synchronous test can drive node
processes and wait for what the subscriber received (``wait_for``)::

    with Subscriber([c.node("n1").url], c.token, "tick:clock") as sub:
        wait_for(lambda: len(sub.pubs()) >= 3)
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self

from baton.channels.client import Client, Message

if TYPE_CHECKING:
    from baton.testing.cluster import LocalCluster


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
        if row["channel"] == channel and row["role"] == "leader"
    ]


__all__ = ["Subscriber", "channel_leaders", "channel_views"]
