"""A watchdog for the agent's event loop.

Every lease renewal, store call and API request of an agent runs on one asyncio loop. If
something holds that loop (a synchronous call by mistake, a thread holding the GIL, a starved
CPU), renewals stop without any error of their own and leases expire "for no reason". The
watchdog makes that visible: a task on the loop stamps a heartbeat; a thread outside it notices
when the stamp grows old, looks at what the loop's thread is running at that moment, and logs
one line when the stall ends::

    event loop stalled seconds=3.2 where="baton/spark/session.py:88 in build_session"

``where`` is the innermost frame of baton's own code on the loop's thread (or the innermost
frame when none is baton's), taken while the loop was held: the line to look at. Stalls also
count in ``baton_event_loop_stall_seconds`` on ``/metrics``.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import threading
import time
from types import FrameType

from prometheus_client import CollectorRegistry, Histogram

log = logging.getLogger("baton.node")

#: How often the loop stamps its heartbeat, seconds.
BEAT = 0.1


def where(frame: FrameType | None) -> str:
    """``file:line in function`` of the innermost frame of baton's code below ``frame`` (the
    innermost frame itself when none is baton's)."""
    first: str | None = None
    while frame is not None:
        code = frame.f_code
        path = code.co_filename
        here = f"{path}:{frame.f_lineno} in {code.co_name}"
        first = first or here
        marker = path.rfind("/baton/")
        if marker >= 0:
            return f"{path[marker + 1 :]}:{frame.f_lineno} in {code.co_name}"
        frame = frame.f_back
    return first or "unknown"


class LoopWatchdog:
    """Reports stalls of the running loop longer than ``threshold`` seconds (see the module
    docstring). ``start()`` on the loop, ``stop()`` before it closes."""

    def __init__(self, threshold: float, registry: CollectorRegistry | None = None) -> None:
        self.threshold = threshold
        self.stalls = Histogram(
            "baton_event_loop_stall_seconds",
            "Stalls of the agent's event loop longer than the watchdog's threshold",
            buckets=(0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0),
            registry=registry,
        )
        self._beat = time.monotonic()
        self._gap = 0.0
        self._loop_thread = 0
        self._task: asyncio.Task[None] | None = None
        self._halt = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="loop-watchdog", daemon=True)

    def start(self) -> None:
        self._loop_thread = threading.get_ident()
        self._beat = time.monotonic()
        self._task = asyncio.get_running_loop().create_task(self._stamp(), name="loop-heartbeat")
        self._thread.start()

    async def stop(self) -> None:
        self._halt.set()
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _stamp(self) -> None:
        while True:
            now = time.monotonic()
            # The gap is set before the beat, so a watcher that sees the fresh beat sees it.
            self._gap = now - self._beat - BEAT
            self._beat = now
            await asyncio.sleep(BEAT)

    def _watch(self) -> None:
        stalled_at: str | None = None
        check = min(self.threshold / 4, 0.25)
        while not self._halt.wait(check):
            late = time.monotonic() - self._beat - BEAT
            if late > self.threshold:
                if stalled_at is None:
                    # Where the loop is now, once per stall: what holds it.
                    stalled_at = where(sys._current_frames().get(self._loop_thread))
            elif stalled_at is not None:
                seconds = max(self._gap, self.threshold)
                self.stalls.observe(seconds)
                log.warning(
                    "event loop stalled", extra={"seconds": round(seconds, 2), "where": stalled_at}
                )
                stalled_at = None
