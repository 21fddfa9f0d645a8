"""Hot standby: a standby's Spark session made ready to apply before it is needed.

Building a session starts the JVM (a few seconds), but the first worker query of a session
costs far more than that: Spark starts its Python data source and worker processes, loads and
compiles its streaming classes, and baton's source and sink modules are imported in each, so
the first event applied comes 9 s after the worker's start on an idle 2-core machine (15-40 s
on a loaded one), against about 1 s for every later start in the same session. A standby that
takes a node over would pay that at the worst moment.

:func:`warm_up` pays it in advance: it runs one worker of the node's mode, end to end, over a
throwaway root and branch (SQLite files in a temporary directory) until one event is applied,
then stops it and removes the files. What it leaves warm is the session's, not the node's:
the takeover then starts the real worker at the real node's position, fenced by its own epoch,
as before. Nothing of the throwaway set touches a real node.

Over Spark Connect it runs nothing: the server's JVM and Python workers are shared by its
clients and outlive them, so they are warm from its first worker on, and a client's own
start-up is its gRPC session. It is best effort: a warm-up that fails or runs out of time says
so in one line and the standby stays as it was (cold: the takeover is slower, never wrong).
It needs the executors to see the local temporary directory (local Spark, or a cluster on the
same host); elsewhere it fails that way.
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import sqlite3
import tempfile
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

from baton.cascade import node_ops
from baton.cascade.db import open_node_db
from baton.cascade.model import Role
from baton.cascade.ticker import TickerConfig, tick_once
from baton.logs import describe
from baton.service.mode import Mode
from baton.service.worker import Worker

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger("baton.cascade")

#: Seconds a warm-up may take before it is given up (the standby stays cold).
WARM_TIMEOUT = 120.0
#: The throwaway set's name (a query's name carries it: it is never a real node's).
WARM_SET = "baton-warm-up"
#: How often the warm-up ticks its root and looks for the applied event.
POLL = 0.05

_TABLE = "CREATE TABLE warm (id INTEGER PRIMARY KEY, v INTEGER)"

#: (session id, mode) pairs already warm in this process: the next standby need not pay again.
_DONE: set[tuple[int, Mode]] = set()
_LOCK = threading.Lock()


def warm_up(
    spark: SparkSession,
    mode: str = Mode.MICRO_BATCH,
    *,
    halt: threading.Event | None = None,
    timeout: float = WARM_TIMEOUT,
) -> float | None:
    """Run one ``mode`` worker over a throwaway root -> branch pair until it applied one
    event; the seconds it took, 0.0 when ``spark`` was warm for ``mode`` already, or None
    when it did not finish (failed, timed out, or ``halt`` set: the standby stays cold)."""
    from baton.spark.session import is_connect

    mode = Mode(mode)
    key = (id(spark), mode)
    with _LOCK:  # one warm-up at a time per process: two would race for the same first start
        if key in _DONE:
            return 0.0
        if is_connect(spark):
            # Nothing to warm here: a Connect server's JVM and Python workers are shared by
            # its clients and outlive them, so they are warm from its first worker on.
            _DONE.add(key)
            return 0.0
        started = time.monotonic()
        directory = Path(tempfile.mkdtemp(prefix="baton-warm-"))
        try:
            _run(spark, mode, directory, halt or threading.Event(), timeout)
        except Exception as exc:  # baton's errors and Spark's own (Py4J, a Connect status)
            # One line: Spark's messages carry the JVM's trace, folded into the first 300 chars.
            log.warning(
                "spark warm-up failed; the standby stays cold",
                extra={"mode": mode.value, "error": describe(exc)[:300]},
            )
            return None
        finally:
            shutil.rmtree(directory, ignore_errors=True)
        if halt is not None and halt.is_set():
            return None
        _DONE.add(key)
        took = round(time.monotonic() - started, 2)
        log.info("spark warm", extra={"mode": mode.value, "seconds": took})
        return took


def _run(
    spark: SparkSession, mode: Mode, directory: Path, halt: threading.Event, timeout: float
) -> None:
    deadline = time.monotonic() + timeout
    if halt.is_set():
        return
    root, branch = (f"sqlite://{directory / n}.db" for n in ("root", "branch"))
    for name in ("root", "branch"):
        with contextlib.closing(sqlite3.connect(directory / f"{name}.db")) as made:
            made.execute(_TABLE)
    node_ops.create_root("root", root, WARM_SET)
    node_ops.create_subscriber(Role.BRANCH, "branch", branch, "root", root)
    for location in (root, branch):
        node_ops.add_table(location, "warm")
    node_ops.copy_table(branch, "warm")
    with open_node_db(root) as db, db.transaction() as cur:
        cur.execute("INSERT INTO warm (id, v) VALUES (1, 1)")
    cfg = TickerConfig(period=POLL, max_lag=POLL, idle=1.0)
    worker = Worker(spark, branch, epoch=1, mode=mode, halt=halt)
    try:
        worker.start()
        with open_node_db(root) as at_root, open_node_db(branch) as at_branch:
            while not halt.is_set():
                tick_once(at_root, cfg, time.time())
                if at_branch.read_rows("warm"):
                    return
                if time.monotonic() > deadline:
                    raise TimeoutError(f"no event applied within {timeout:g} s")
                worker.check()
                if worker.starved:
                    # Waiting on would only keep the standby from campaigning: it goes on
                    # cold, and its worker says the same once it serves.
                    raise TimeoutError("the cluster gave this application no executor")
                halt.wait(POLL)
    finally:
        worker.close()
