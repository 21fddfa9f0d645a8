"""One election participant as a process, for multi-process tests and benchmarks.

``python -m baton.testing.participant STORE_URL NAME ID LOG_PATH [TTL]`` campaigns with
:class:`~baton.lease.election.Election` and, while leader, appends to a :class:`FencedLog` every
20 ms, checking its term right before each append (as leader code should). It prints one line
per event on stdout (``leader EPOCH``, ``lost EPOCH REASON``) so a test can follow it.
"""

from __future__ import annotations

import asyncio
import signal
import sys

from baton.errors import LeaseLost
from baton.lease.election import Election, LeadershipLost
from baton.lease.timings import Timings
from baton.store import open_store
from baton.testing.fenced import FencedLog


async def run(url: str, name: str, node_id: str, log_path: str, ttl: float) -> None:
    log = FencedLog(log_path)
    store = open_store(url)
    await store.connect()
    election = Election(store, name, node_id, Timings.for_ttl(ttl))

    def report(event: object) -> None:
        if isinstance(event, LeadershipLost):
            print(f"lost {event.epoch} {event.reason.value}", flush=True)

    election.on_event(report)
    stop = asyncio.Event()
    await election.start()

    async def lead() -> None:
        while not stop.is_set():
            try:
                async with election.leadership() as term:
                    print(f"leader {term.epoch}", flush=True)
                    while not stop.is_set():
                        term.check()
                        log.append(term.epoch, node_id)  # sync: never runs after a cancel
                        await asyncio.sleep(0.02)
            except LeaseLost:
                continue

    # SIGTERM cancels the loop wherever it waits: a follower waits for leadership, and would
    # not see a flag until it led (tests then waited out their stop timeout).
    body = asyncio.ensure_future(lead())
    loop = asyncio.get_running_loop()

    def terminate() -> None:
        stop.set()
        body.cancel()

    loop.add_signal_handler(signal.SIGTERM, terminate)
    try:
        await body
    except asyncio.CancelledError:
        pass
    finally:
        await election.stop()
        await store.close()


def main() -> None:
    ttl = float(sys.argv[5]) if len(sys.argv) > 5 else 2.0
    asyncio.run(run(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], ttl))


if __name__ == "__main__":
    main()
