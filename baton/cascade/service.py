"""What runs for one cascade node: the ticker when it is the root, the Spark worker otherwise.

:class:`NodeService` follows the node's role as it changes (a switchover or failover turns a
branch into the root and the root into a branch), and is what both ``baton cascade run`` and
the placement workload type ``cascade-worker`` run. It is blocking code driven by
:meth:`NodeService.step`, called every ``interval`` seconds from a thread.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from baton.cascade.model import Role
from baton.cascade.nodedb import open_node_db
from baton.cascade.ticker import TickerConfig, publish_watermark, tick_once
from baton.cascade.watermark import PULL_INTERVAL, Every, pull_watermarks
from baton.cascade.worker import Worker

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger("baton.cascade")


class NodeService:
    """The ticker or the worker of the node at ``location``, fenced by ``epoch``."""

    def __init__(
        self,
        location: str,
        epoch: int,
        spark: Callable[[], SparkSession] | None = None,
        ticker: TickerConfig | None = None,
    ) -> None:
        self.location = location
        self.epoch = epoch
        self._spark_factory = spark
        self._spark: SparkSession | None = None
        self.ticker = ticker or TickerConfig()
        self.worker: Worker | None = None
        self.role: Role | None = None
        self._pull = Every(PULL_INTERVAL)

    def spark(self) -> SparkSession:
        if self._spark is None:
            if self._spark_factory is not None:
                self._spark = self._spark_factory()
            else:
                from baton.spark.session import build_session

                self._spark = build_session()
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
                tick_once(db, self.ticker, time.time())
                if self._pull.due():
                    pull_watermarks(db)
                publish_watermark(db)
                return
        if self.worker is None:
            self.worker = Worker(self.spark(), self.location, self.epoch)
        self.worker.check()

    def stop(self) -> None:
        if self.worker is not None:
            self.worker.close()
            self.worker = None
