"""One snapshot timer shared by every dashboard socket of a node.

While at least one page is connected, the feed builds a snapshot every ``interval`` seconds
(one build, however many pages) and publishes it only when it differs from the last one, as a
new *version*. Each socket waits for a version newer than the one it sent last, so a page
that falls behind skips straight to the newest snapshot (nothing queues up). With no page
connected nothing is built.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import Any

from baton.logs import describe

log = logging.getLogger("baton.api")

#: Seconds between two snapshots while a page is connected: a change reaches the page within
#: this plus the time one snapshot takes to read.
INTERVAL = 0.5


def _body(snapshot: dict[str, Any]) -> str:
    """The part of a snapshot that decides whether it changed (everything but its time)."""
    return json.dumps({k: v for k, v in snapshot.items() if k != "at"}, sort_keys=True)


class Feed:
    """Builds snapshots with ``build`` while anyone listens (:meth:`updates`)."""

    def __init__(
        self, build: Callable[[], Awaitable[dict[str, Any]]], interval: float = INTERVAL
    ) -> None:
        self.build = build
        self.interval = interval
        self.version = 0
        self.latest: dict[str, Any] | None = None
        self._body = ""
        self._changed = asyncio.Condition()
        self._listeners = 0
        self._task: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()

    async def refresh(self) -> dict[str, Any]:
        """Build a snapshot now (one at a time) and publish it if it changed; the newest."""
        async with self._lock:
            snapshot = await self.build()
            body = _body(snapshot)
            if body != self._body or self.latest is None:
                self._body = body
                self.latest = snapshot
                self.version += 1
                async with self._changed:
                    self._changed.notify_all()
            return self.latest

    async def current(self) -> dict[str, Any]:
        """The newest snapshot: the one the timer keeps fresh while it runs, else a new one."""
        if self._task is not None and self.latest is not None:
            return self.latest
        return await self.refresh()

    async def _run(self) -> None:
        while True:
            try:
                await self.refresh()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                # A bug in one part must not stop every page's updates: say it, go on.
                log.error("dashboard snapshot failed", extra={"error": describe(exc)})
            await asyncio.sleep(self.interval)

    def _newer_than(self, version: int) -> Callable[[], bool]:
        return lambda: self.version > version

    async def updates(self) -> AsyncGenerator[tuple[int, dict[str, Any]], None]:
        """(version, snapshot) now and after every change, for as long as the caller
        iterates; the timer runs while anyone does."""
        self._listeners += 1
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="dashboard-feed")
        try:
            sent = 0
            while True:
                async with self._changed:
                    await self._changed.wait_for(self._newer_than(sent))
                assert self.latest is not None
                sent = self.version
                yield sent, self.latest
        finally:
            self._listeners -= 1
            if self._listeners == 0 and self._task is not None:
                task, self._task = self._task, None
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task


__all__ = ["INTERVAL", "Feed"]
