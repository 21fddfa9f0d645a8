"""What runs for one cascade node: the ticker when it is the root, the Spark worker otherwise.

:class:`NodeService` follows the node's role as it changes (a switchover or failover turns a
branch into the root and the root into a branch), and is what both ``baton cascade run`` and
the placement workload type ``cascade-worker`` run. It is blocking code: :meth:`NodeService.run`
calls :meth:`NodeService.step` every :data:`INTERVAL` seconds in a thread, with the one error
policy every runner of a node shares:

- a newer epoch applied to the node (:class:`FencedOut`): the run ends, the caller's leadership
  is over;
- anything else (a node database locked or unreachable, a store hiccup, a Spark query that
  keeps failing, a provider not there yet): one line saying what the node waits for, then the
  step again after a backoff (0.5 s doubling to 10 s), for as long as the caller leads. Bad
  input is refused before a service starts; a running service never exits on its own.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from baton.backoff import Backoff
from baton.cascade.beat import Heartbeat, Phase
from baton.cascade.db import open_node_db
from baton.cascade.model import Role
from baton.cascade.ticker import TickerConfig, publish_watermark, tick_once
from baton.cascade.watermark import PULL_INTERVAL, Every, pull_watermarks
from baton.clock import SYSTEM, Clock
from baton.errors import FencedOut
from baton.service.worker import MICRO_BATCH, Worker
from baton.spark.lifecycle import shared_session
from baton.spark.session import jvm_alive

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger("baton.cascade")

#: How often the service steps (ticker period; the worker's check interval).
INTERVAL = 0.05
#: Backoff after a failed step: from the first value, doubling up to the second.
BACKOFF = (0.5, 10.0)
#: Seconds between two lines about the same failure that goes on.
STILL_WAITING = 60.0


class NodeService:
    """The ticker or the worker of the node at ``location``, fenced by ``epoch``."""

    def __init__(
        self,
        location: str,
        epoch: int,
        spark: Callable[[], SparkSession] | None = None,
        ticker: TickerConfig | None = None,
        *,
        mode: str = MICRO_BATCH,
        clock: Clock = SYSTEM,
    ) -> None:
        self.location = location
        #: The ticker's clock: when a tick is due (its ``time()``, the wall clock the node
        #: database stamps events and ticks with).
        self.clock = clock
        #: How the worker applies: :data:`~baton.service.worker.MODES`.
        self.mode = mode
        self.epoch = epoch
        self._spark_factory = spark
        self._spark: SparkSession | None = None
        self.ticker = ticker or TickerConfig()
        self.worker: Worker | None = None
        self.role: Role | None = None
        self._pull = Every(PULL_INTERVAL)
        #: The last step's failure ("" after a good step): what the node waits for.
        self.error = ""
        #: Since when (monotonic) it has waited for that, when it last said so, how many tries.
        self._waiting_since = 0.0
        self._said_at = 0.0
        self._tries = 0
        #: The flag :meth:`run` stops on, passed on to the worker (so a start waiting for a
        #: first micro-batch ends its wait when the service is stopped).
        self._halt: threading.Event | None = None

    def spark(self) -> SparkSession:
        """The session the worker runs on: the one held, else one from the factory (by
        default the process's :func:`~baton.spark.lifecycle.shared_session`), which replaces
        a session whose JVM died."""
        if self._spark is None:
            self._spark = (self._spark_factory or shared_session)()
        return self._spark

    def step(self) -> None:
        """One round: tick (root) or keep the worker in line (branch, leaf)."""
        with open_node_db(self.location) as db:
            role = db.state().role
            if role is not self.role:
                log.info("cascade node role", extra={"location": self.location, "as": role.value})
                self.role = role
            if role is Role.ROOT:
                if self.worker is not None:
                    self.worker.close()
                    self.worker = None
                tick_once(db, self.ticker, self.clock.time())
                if self._pull.due():
                    pull_watermarks(db)
                publish_watermark(db)
                return
        if self._spark is not None and not jvm_alive(self._spark):
            # The JVM died under the worker: drop both. The factory's owner of the session
            # (:class:`~baton.spark.lifecycle.SparkSessions`) sees it dead too and builds the
            # next one on a new JVM.
            if self.worker is not None:
                with contextlib.suppress(Exception):
                    self.worker.close()
                self.worker = None
            self._spark = None
        if self.worker is None:
            spark = self.spark()  # may take long (a JVM starting): stopped meanwhile?
            if self._halt is not None and self._halt.is_set():
                return
            self.worker = Worker(spark, self.location, self.epoch, mode=self.mode, halt=self._halt)
        self.worker.check()

    def phase(self) -> tuple[Phase, str]:
        """What the service does now, and what it waits for (its heartbeat's content)."""
        if self.error:
            return Phase.WAITING, self.error
        if self.role is Role.ROOT:
            return Phase.TICKING, ""
        if self.worker is None:
            return Phase.STARTING, ""
        return Phase.APPLYING, ""

    def run(self, halt: threading.Event) -> None:
        """Step until ``halt`` is set; raises :class:`FencedOut` when a newer epoch took the
        node over. See the module docstring for the error policy. Stops the worker on exit.
        Beats for the node meanwhile (:mod:`baton.cascade.beat`): ``cascade status`` shows
        it served, and ``switchover`` takes it as a target."""
        delay = INTERVAL
        backoff = Backoff(*BACKOFF)
        self._halt = halt
        beat = Heartbeat(self.location, self.epoch, self.phase)
        beat.start()
        try:
            while not halt.wait(delay):
                try:
                    self.step()
                except FencedOut:
                    raise
                except Exception as exc:
                    delay = backoff.next()
                    self._failed(exc, delay)
                    continue
                if self.error:
                    log.info("cascade node service resumed", extra={"location": self.location})
                    self.error = ""
                backoff.reset()
                delay = INTERVAL
        finally:
            self.stop()
            beat.stop()

    def _failed(self, exc: Exception, delay: float) -> None:
        from baton.errors import BatonError
        from baton.logs import describe

        error = describe(exc)
        now = time.monotonic()
        if error != self.error:  # one line per distinct cause, not one per retry
            log.warning(
                "cascade node service waits",
                extra={"location": self.location, "error": error, "retry_s": delay},
                # An error baton does not expect keeps its trace (in the log, for a report).
                exc_info=not isinstance(exc, BatonError),
            )
            self._waiting_since = self._said_at = now
            self._tries = 0
        elif now - self._said_at >= STILL_WAITING:
            # The same cause for a long time: say it again, so a node stuck for minutes is
            # not silent after its first line.
            log.warning(
                "cascade node service still waits",
                extra={
                    "location": self.location,
                    "error": error,
                    "for_s": round(now - self._waiting_since),
                    "tries": self._tries,
                },
            )
            self._said_at = now
        self._tries += 1
        self.error = error

    def stop(self) -> None:
        if self.worker is not None:
            self.worker.close()
            self.worker = None
