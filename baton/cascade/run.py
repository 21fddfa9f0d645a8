"""``baton cascade run NODE``: run one cascade node's service (ticker or Spark worker) under a
fenced lease, so that exactly one process serves the node at a time.

The process campaigns for the lease ``cascade/<set>/<node>`` in the coordination store. While it
leads, it runs :class:`~baton.cascade.service.NodeService` with the lease's epoch as the worker
epoch: a node database refuses batches from any older epoch, so a paused or partitioned previous
worker can never apply after its successor. When the lease is lost the service stops at once.
SIGTERM or Ctrl-C stop it cleanly and release the lease.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from baton.cascade.nodedb import open_node_db
from baton.cascade.service import NodeService
from baton.cascade.ticker import TickerConfig
from baton.election import Election
from baton.errors import LeaseLost
from baton.store import open_store
from baton.timings import Timings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger("baton.cascade")

#: How often the service steps (ticker period; the worker's check interval).
INTERVAL = 0.05


async def run_node(
    location: str,
    store_url: str,
    ttl: float = 10.0,
    spark_work_dir: Path | None = None,
    ticker: TickerConfig | None = None,
) -> int:
    """Serve the node at ``location`` until a stop signal; the exit status."""
    with open_node_db(location) as db:
        st = db.state()
    holder = f"{socket.gethostname()}:{os.getpid()}"
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    sessions: list[SparkSession] = []

    def spark() -> SparkSession:
        # One session for the process, however often leadership comes and goes.
        if not sessions:
            from baton.spark.session import build_session

            quiet = spark_work_dir is not None
            sessions.append(build_session(work_dir=spark_work_dir, quiet=quiet))
        return sessions[0]

    if st.provider is not None:
        # Start the JVM before campaigning: it takes seconds, a new leader should not.
        await asyncio.to_thread(spark)
    async with open_store(store_url) as store:
        election = Election(store, f"cascade/{st.set_name}/{st.name}", holder, Timings.for_ttl(ttl))
        await election.start()
        try:
            while not stop.is_set():
                waiting = asyncio.ensure_future(stop.wait())
                leading = asyncio.ensure_future(_serve(election, location, spark, ticker, stop))
                await asyncio.wait([waiting, leading], return_when="FIRST_COMPLETED")
                waiting.cancel()
                if not leading.done():
                    leading.cancel()
                try:
                    await leading
                except (LeaseLost, asyncio.CancelledError) as exc:
                    log.warning("cascade node service stopped", extra={"reason": str(exc)})
        finally:
            await election.stop()
    return 0


async def _serve(
    election: Election,
    location: str,
    spark: Callable[[], SparkSession],
    ticker: TickerConfig | None,
    stop: asyncio.Event,
) -> None:
    async with election.leadership() as term:
        service = NodeService(location, term.epoch, spark, ticker)
        log.info("serving cascade node", extra={"location": location, "epoch": term.epoch})
        try:
            while not stop.is_set():
                await asyncio.to_thread(service.step)
                await asyncio.sleep(INTERVAL)
        finally:
            await asyncio.shield(asyncio.to_thread(service.stop))
