"""Short pauses from Python's cyclic garbage collector in a long-running node.

A node serving thousands of WebSocket subscribers holds hundreds of thousands of long-lived
objects (each connection's server protocol, ASGI scope, tasks and queues). CPython's full
collection walks every one of them: measured at 10,000 subscribers over three nodes, each
node's full collections took 0.4-0.95 s, came about every half minute, and held the event
loop, so publications, lease renewals and API answers all waited behind them.

The keeper moves what the node holds into the collector's permanent generation every
:data:`FREEZE_EVERY` seconds (``gc.freeze()``: constant time), so a full collection walks only
what was made since. What the frozen part holds is still freed by reference counting when let
go; only garbage in reference cycles made before a freeze waits, until the keeper thaws the
heap every :data:`THAW_EVERY` seconds and collects it all once (one long pause there, instead
of one every half minute). Only the node's own process runs it (``baton node``); a library
user's process keeps its collector as it was.

The keeper also freezes at once after every full collection the collector makes by itself:
what survived one is long-lived by definition. Without that, a node whose heap grows fast
between two freezes (10,000 subscribers reconnecting to a restarted node) walked all of the new
part again at every full collection: 0.5-1.3 s pauses in a subscribe storm, measured, in the
seconds when lease renewals matter most.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import time

from baton.clock import SYSTEM, Clock

log = logging.getLogger("baton.node")

#: Seconds between freezes of what the node holds.
FREEZE_EVERY = 10.0
#: Seconds between full collections of everything (frozen included).
THAW_EVERY = 900.0


class HeapKeeper:
    """Freezes the heap every ``freeze_every`` and collects all of it every ``thaw_every``
    seconds; ``start()`` on the node's loop, ``stop()`` (which thaws) before it closes."""

    def __init__(
        self,
        clock: Clock = SYSTEM,
        freeze_every: float = FREEZE_EVERY,
        thaw_every: float = THAW_EVERY,
    ) -> None:
        self.clock = clock
        self.freeze_every = freeze_every
        self.thaw_every = thaw_every
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        # What the node has made by now (modules, configuration, stores) is kept for its life.
        gc.freeze()
        gc.callbacks.append(self._after_collection)
        self._task = asyncio.get_running_loop().create_task(self._run(), name="heap-keeper")

    @staticmethod
    def _after_collection(phase: str, info: dict[str, int]) -> None:
        """Freeze the survivors of a full collection, so the next walks only what is new."""
        if phase == "stop" and info["generation"] == 2:
            gc.freeze()

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        if self._after_collection in gc.callbacks:
            gc.callbacks.remove(self._after_collection)
        gc.unfreeze()

    async def _run(self) -> None:
        thaw_at = self.clock.monotonic() + self.thaw_every
        while True:
            await self.clock.sleep(self.freeze_every)
            if self.clock.monotonic() >= thaw_at:
                thaw_at = self.clock.monotonic() + self.thaw_every
                self.collect_all()
            gc.freeze()

    @staticmethod
    def collect_all() -> None:
        """Thaw and collect everything once: the cycles made garbage while frozen go."""
        frozen = gc.get_freeze_count()
        started = time.perf_counter()
        gc.unfreeze()
        freed = gc.collect()
        log.info(
            "heap collected",
            extra={
                "seconds": round(time.perf_counter() - started, 3),
                "frozen": frozen,
                "freed": freed,
            },
        )


__all__ = ["FREEZE_EVERY", "THAW_EVERY", "HeapKeeper"]
