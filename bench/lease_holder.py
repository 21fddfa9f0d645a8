"""A process holding N leases with a :class:`~baton.lease.keeper.LeaseKeeper`, for the idle
benchmark.

``python -m bench.lease_holder STORE_URL N [TTL]``: opens the store, starts a keeper (holder
``bench-holder``, ``Timings.for_ttl(TTL)``, default 10 s), acquires ``lease/0`` ...
``lease/N-1`` with ``add_many``, prints ``ready <held>`` and then idles (the keeper renews every
lease in one store call per renew interval) until SIGTERM/SIGINT, when it prints
``done held=<n> renewals=<calls> lost=<n>``, stops the keeper (releasing everything) and exits.
"""

from __future__ import annotations

import asyncio
import signal
import sys

from baton.errors import LossReason
from baton.lease.keeper import LeaseKeeper
from baton.lease.timings import Timings
from baton.store import open_store

HOLDER = "bench-holder"


async def hold(url: str, n: int, ttl: float) -> int:
    lost: list[str] = []

    def on_lost(name: str, reason: LossReason) -> None:
        lost.append(name)

    store = open_store(url)
    keeper = LeaseKeeper(store, HOLDER, Timings.for_ttl(ttl), on_lost=on_lost)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        await keeper.start()
        got = await keeper.add_many(f"lease/{i}" for i in range(n))
        held = sum(1 for lease in got.values() if lease is not None)
        print(f"ready {held}", flush=True)
        await stop.wait()
        print(
            f"done held={len(keeper)} renewals={keeper.renewal_calls} lost={len(lost)}",
            flush=True,
        )
    finally:
        await keeper.stop()
        await store.close()
    return 0 if held == n and not lost else 1


def main(argv: list[str]) -> int:
    if len(argv) not in (2, 3):
        print(__doc__, file=sys.stderr)
        return 2
    ttl = float(argv[2]) if len(argv) == 3 else 10.0
    return asyncio.run(hold(argv[0], int(argv[1]), ttl))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
