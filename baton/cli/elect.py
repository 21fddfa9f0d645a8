"""``baton elect NAME -- COMMAND``: run COMMAND only while holding leadership of NAME.

The work is done by :mod:`baton.lease.supervisor` (and its guard process); this module turns
SIGINT and SIGTERM into a stop, prints what happens, and maps the outcome to an exit status:
COMMAND's own when it exits by itself (the lease is then released); 75 when leadership was lost
and COMMAND was stopped; 130/143 on SIGINT/SIGTERM; 2 for bad input; 1 when the store cannot be
used.
"""

from __future__ import annotations

import asyncio
import logging
import signal

from baton.lease.supervisor import supervise
from baton.lease.timings import Timings

EXIT_LOST = 75  # EX_TEMPFAIL: run it again to campaign again


log = logging.getLogger("baton.elect")
# Its own lines are what `baton elect` is for (the process's other loggers say warnings only).
log.setLevel(logging.INFO)


def say(message: str, warn: bool = False, **fields: object) -> None:
    """One line of what happens, in the log format every service uses."""
    log.log(logging.WARNING if warn else logging.INFO, message, extra=fields)


async def run(name: str, store_url: str, timings: Timings, holder: str, argv: list[str]) -> int:
    """Campaign for ``name`` and run ``argv`` while leader. Returns the exit status."""
    stop = asyncio.Event()
    stop_signal: list[int] = []
    loop = asyncio.get_running_loop()

    def on_signal(sig: int) -> None:
        if not stop_signal:
            say("stopping", signal=signal.Signals(sig).name)
        stop_signal.append(sig)
        stop.set()

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, on_signal, sig)
    try:
        outcome = await supervise(store_url, name, holder, timings, argv, stop=stop, say=say)
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
    if outcome.how == "exited":
        return outcome.status
    if outcome.how == "lost":
        return EXIT_LOST
    return 128 + (stop_signal[0] if stop_signal else signal.SIGTERM)
