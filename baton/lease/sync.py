"""A thin synchronous facade over :class:`~baton.lease.election.Election`, for code that is not
async (scripts, Spark drivers, threads). It runs the one asyncio implementation on a private
event-loop thread; it is not a second implementation.

::

    with SyncElection("sqlite:///var/lib/baton/baton.db", "nightly-report", "host-a") as e:
        term = e.wait_leadership(timeout=60)
        for chunk in work():
            term.check()              # raises LeaseLost once leadership is gone
            write(chunk, epoch=term.epoch)
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from types import TracebackType
from typing import Any, Self, TypeVar

from baton.lease.election import Election, Term
from baton.lease.timings import Timings
from baton.store import open_store

T = TypeVar("T")


class SyncElection:
    """Blocking handle on an :class:`Election` for lease ``name`` as ``node_id``."""

    def __init__(
        self, store_url: str, name: str, node_id: str, timings: Timings | None = None
    ) -> None:
        self._store = open_store(store_url)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name=f"baton-election:{name}", daemon=True
        )
        self._thread.start()
        self.election = Election(self._store, name, node_id, timings)

    def _call(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    def start(self) -> None:
        self._call(self.election.start())

    def stop(self) -> None:
        """Resign if leader, stop campaigning, close the store and the loop thread."""
        if self._loop.is_closed():
            return
        try:
            self._call(self.election.stop())
            self._call(self._store.close())
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
            self._loop.close()

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    @property
    def is_leader(self) -> bool:
        return self.election.is_leader

    @property
    def epoch(self) -> int | None:
        return self.election.epoch

    @property
    def leader(self) -> str | None:
        return self.election.leader

    def wait_leadership(self, timeout: float | None = None) -> Term:
        """Block until this node leads; ``TimeoutError`` after ``timeout`` seconds."""
        return self._call(self.election.wait_leadership(timeout))

    def wait_leader(self, timeout: float | None = None) -> str:
        return self._call(self.election.wait_leader(timeout))

    def resign(self) -> bool:
        return self._call(self.election.resign())

    def elect(self, node_id: str) -> None:
        self._call(self.election.elect(node_id))
