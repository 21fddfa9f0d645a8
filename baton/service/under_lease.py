"""``baton cascade run NODE``: run one cascade node's service (ticker or Spark worker) under a
fenced lease, so that exactly one process serves the node at a time.

The process campaigns for the lease ``cascade/<set>/<node>`` in the coordination store. While it
leads, it runs :class:`~baton.service.node.NodeService` with the lease's epoch as the worker
epoch: a node database refuses batches from any older epoch, so a paused or partitioned previous
worker can never apply after its successor. When the lease is lost the service stops at once.
SIGTERM or Ctrl-C stop it cleanly and release the lease.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from baton.backoff import Backoff
from baton.cascade.db import open_node_db
from baton.cascade.ticker import TickerConfig
from baton.errors import FencedOut, LeaseLost, NodeUnreachable, SparkUnavailable
from baton.keys import cascade_lease
from baton.lease.election import Election
from baton.lease.timings import Timings
from baton.logs import describe
from baton.service.node import BACKOFF, NodeService
from baton.service.worker import MICRO_BATCH
from baton.store import open_store

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger("baton.cascade")


def _since(started: float) -> float:
    return round(time.monotonic() - started, 1)


#: SQLite locations already warned about (once per process is enough).
_WARNED: set[str] = set()


T = TypeVar("T")


async def until_ready(
    call: Callable[[], T],
    retry_on: type[BaseException],
    waiting: str,
    stop: asyncio.Event,
) -> T | None:
    """``call()`` in a thread, again after a backoff (0.5 s doubling to 10 s) while it raises
    ``retry_on``, with one line (``waiting``, and the error) per distinct cause; None if
    ``stop`` is set meanwhile. Anything else it raises goes to the caller."""
    backoff = Backoff(*BACKOFF)
    said = ""
    while not stop.is_set():
        try:
            return await asyncio.to_thread(call)
        except retry_on as exc:
            error = describe(exc)
            if error != said:  # one line per cause, not one per try
                log.warning(waiting, extra={"error": error, "retry_s": backoff.current})
                said = error
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), backoff.next())
    return None


async def node_identity(location: str, stop: asyncio.Event) -> tuple[str, str, bool] | None:
    """(set, node, has a provider) of the node at ``location``, waiting (with one line saying
    so) while its database is locked or unreachable; None if stopped meanwhile. A location
    that is not a node raises :class:`CascadeError` (bad input)."""

    def read() -> tuple[str, str, bool]:
        with open_node_db(location) as db:
            st = db.state()
        return st.set_name, st.name, st.provider is not None

    return await until_ready(read, NodeUnreachable, "waiting for the node database", stop)


async def run_node(
    location: str,
    store_url: str,
    ttl: float = 10.0,
    spark_work_dir: Path | None = None,
    ticker: TickerConfig | None = None,
    *,
    mode: str = MICRO_BATCH,
    stop: asyncio.Event | None = None,
    master: str | None = None,
    remote: str | None = None,
    connect_session: str | None = None,
    conf: Mapping[str, str] | None = None,
    warm: bool = True,
) -> int:
    """Serve the node at ``location`` until a stop signal (or ``stop`` is set); the exit
    status. ``warm``: a subscriber warms its session (:mod:`baton.service.warm`) before it
    campaigns. ``mode``: how its worker applies (:data:`~baton.service.worker.MODES`); ``master``
    or ``remote``: where the process's session runs (:func:`baton.spark.session.where`: the
    ``BATON_SPARK_*`` variables, else a local session of at least 8 slots);
    ``connect_session``: the name of its Spark Connect session (by default the node's lease),
    which a successor reattaches to;
    ``conf``: Spark settings for the session (``--spark-conf``)."""
    holder = f"{socket.gethostname()}:{os.getpid()}"
    if stop is None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
    identity = await node_identity(location, stop)
    if identity is None:
        return 0
    set_name, name, subscriber = identity

    work_dir = spark_work_dir or Path(tempfile.mkdtemp(prefix="baton-spark-"))
    session_name = connect_session or cascade_lease(set_name, name)

    failing = False  # the last build failed: its retries are not news

    def spark() -> SparkSession:
        nonlocal failing
        from baton.spark.lifecycle import shared_session
        from baton.spark.session import where

        at = where(master, remote)
        started = time.monotonic()
        if not failing:
            log.info("starting spark", extra={"at": str(at), "log": str(work_dir / "spark.log")})
        if not at.local and location.startswith("sqlite:") and location not in _WARNED:
            _WARNED.add(location)
            # The source and the apply step open the node databases in Spark's tasks.
            log.warning(
                "a SQLite node with Spark off this process: every executor must see the file "
                "at the same path (use PostgreSQL nodes on a cluster)",
                extra={"location": location, "spark": str(at)},
            )
        failing = True
        session = shared_session(
            work_dir=work_dir,
            quiet=True,
            master=at.master,
            remote=at.remote,
            connect_session=session_name,
            conf=conf,
        )
        failing = False
        log.info("spark ready", extra={"at": str(at), "seconds": _since(started)})
        return session

    if subscriber:
        # Start the JVM before campaigning: it takes seconds, a new leader should not. A
        # master or Connect server that does not answer is waited for, as a database is.
        ready = await until_ready(spark, SparkUnavailable, "waiting for spark", stop)
        if ready is None:
            return 0
        if warm:
            # Then its first worker, the seconds that matter most at a takeover (hot standby).
            await _warmed(ready, mode, stop)
            if stop.is_set():
                return 0
    async with open_store(store_url) as store:
        lease = cascade_lease(set_name, name)
        election = Election(store, lease, holder, Timings.for_ttl(ttl))
        await election.start()
        # Ready to serve within a lease's time: a standby says so once (it says nothing more
        # until it takes the node over).
        log.info("campaigning for the node's lease", extra={"lease": lease, "holder": holder})
        try:
            while not stop.is_set():
                waiting = asyncio.ensure_future(stop.wait())
                leading = asyncio.ensure_future(_serve(election, location, spark, ticker, mode))
                await asyncio.wait([waiting, leading], return_when="FIRST_COMPLETED")
                waiting.cancel()
                if not leading.done():
                    leading.cancel()
                try:
                    await leading
                except (LeaseLost, asyncio.CancelledError) as exc:
                    if stop.is_set() and isinstance(exc, asyncio.CancelledError):
                        # Asked to stop (SIGTERM, Ctrl-C): the normal end, not a warning.
                        log.info("cascade node service stopped", extra={"reason": "asked to stop"})
                    else:
                        log.warning("cascade node service stopped", extra={"reason": describe(exc)})
                except FencedOut as exc:
                    # A newer epoch applied to the node: someone else serves it. Give the lease
                    # up and campaign again (after a pause, not to take it straight back).
                    log.warning("cascade node service fenced", extra={"reason": describe(exc)})
                    await election.resign()
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(stop.wait(), ttl)
        finally:
            await election.stop()
    return 0


async def run_nodes(
    locations: list[str],
    store_url: str,
    ttl: float = 10.0,
    spark_work_dir: Path | None = None,
    *,
    mode: str = MICRO_BATCH,
    master: str | None = None,
    remote: str | None = None,
    conf: Mapping[str, str] | None = None,
    warm: bool = True,
) -> int:
    """Serve several nodes in one process until a stop signal: each under its own lease, all
    workers sharing the process's one Spark session (one JVM: a combined root and the
    merge-leaves it hosts, say; over Spark Connect one server session, named after the
    locations so that the next process serving them reattaches to it). The exit status."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    work_dir = spark_work_dir or Path(tempfile.mkdtemp(prefix="baton-spark-"))
    session_name = (
        None if len(locations) == 1 else "baton-cascade-run:" + ",".join(sorted(locations))
    )
    codes = await asyncio.gather(
        *(
            run_node(
                loc,
                store_url,
                ttl,
                work_dir,
                mode=mode,
                stop=stop,
                master=master,
                remote=remote,
                connect_session=session_name,
                conf=conf,
                warm=warm,
            )
            for loc in locations
        )
    )
    return max(codes, default=0)


async def _warmed(spark: SparkSession, mode: str, stop: asyncio.Event) -> None:
    """Warm ``spark`` for ``mode`` in a thread; a stop meanwhile ends the warm-up early."""
    from baton.service.warm import warm_up

    halt = threading.Event()
    stopping = asyncio.ensure_future(stop.wait())
    stopping.add_done_callback(lambda _: halt.set())
    try:
        await asyncio.to_thread(warm_up, spark, mode, halt=halt)
    finally:
        stopping.cancel()


async def _serve(
    election: Election,
    location: str,
    spark: Callable[[], SparkSession],
    ticker: TickerConfig | None,
    mode: str,
) -> None:
    async with election.leadership() as term:
        service = NodeService(location, term.epoch, spark, ticker, mode=mode)
        log.info("serving cascade node", extra={"location": location, "epoch": term.epoch})
        halt = threading.Event()
        running = asyncio.ensure_future(asyncio.to_thread(service.run, halt))
        try:
            await asyncio.shield(running)
        finally:
            # Lost the lease or told to stop: the service stops before this returns (its
            # current step finishes, the worker's query is stopped).
            halt.set()
            with contextlib.suppress(Exception):
                await asyncio.shield(running)
