"""``LocalSet``: a cascade of SQLite node databases in one directory, with the root's ticker in
a thread and Spark workers in this process, for tests and the demo. It builds the set through
the same checked operations as the CLI and the node API (:mod:`baton.cascade.commands`).

::

    with LocalSet(tmp, spark) as s:
        s.root("s1"); s.branch("s2", "s1"); s.leaf("s3", "s2")
        s.add_table("accounts")
        s.start_workers()
        run_workload(s.path("s1"), 100)
        s.wait_synced()
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self

from baton.cascade import beat, commands, node_ops
from baton.cascade.beat import Beat, Heartbeat, Phase
from baton.cascade.db import open_node_db
from baton.cascade.model import Role
from baton.cascade.set_ops import CascadeSet
from baton.cascade.ticker import TickerConfig, publish_watermark, tick_once
from baton.cascade.watermark import PULL_INTERVAL, Every, pull_watermarks
from baton.errors import BatonError
from baton.local.waiting import wait_for
from baton.logs import describe
from baton.service.worker import MICRO_BATCH, Worker
from baton.testing.workload import create_accounts

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger("baton.cascade")

#: Fast ticks for tests: a batch closes 50 ms after its first event.
TEST_TICKER = TickerConfig(period=0.02, max_count=5000, max_lag=0.05, idle=0.5)


def root_and_branch(directory: Path) -> dict[str, str]:
    """SQLite nodes ``s1`` (root) and ``s2`` (its branch) in ``directory``, each with an
    ``accounts`` table added (the branch's to be copied by its worker), and an idle subscriber
    entry ``audit`` holding the root's watermark at tick 1, so that no queue is trimmed and a
    whole stream can be compared event by event afterwards. Node name -> location."""
    loc = {n: f"sqlite://{directory / n}.db" for n in ("s1", "s2")}
    for n in loc:
        create_accounts(directory / f"{n}.db")
    commands.create_root("s1", loc["s1"], "S")
    commands.create_subscriber(Role.BRANCH, "s2", loc["s2"], "s1", loc["s1"])
    for n in ("s1", "s2"):
        commands.add_table(loc["s1"], "accounts", n)
    with open_node_db(loc["s1"]) as root, root.transaction() as cur:
        root.set_watermark(cur, "audit", 1)
    return loc


def apply_from_provider(location: str) -> int:
    """What a node's worker does, by hand and without Spark: apply in one batch everything its
    provider has ticked past its position (nothing for a root or a paused node); its position."""
    from baton.cascade.apply import apply_batch
    from baton.cascade.batches import reduce_events

    with open_node_db(location) as db:
        st = db.state()
        if st.provider is None:
            return st.position
        with open_node_db(db.nodes()[st.provider][0], readonly=True) as prov:
            last = prov.last_tick()
            ticks = prov.ticks(st.position, last.tick_id) if last else []
            events = list(prov.batch_events(st.position, last.tick_id)) if ticks and last else []
        if ticks:
            apply_batch(db, ticks, reduce_events(events), events, epoch=1, provider=st.provider)
        return db.state().position


@contextmanager
def served(
    location: str, epoch: int = 1, phase: Phase = Phase.APPLYING, error: str = ""
) -> Iterator[Heartbeat]:
    """Beat for the node at ``location`` as its service would while the block runs, for a
    test that applies batches itself (``switchover`` checks that its target is served)."""
    beat = Heartbeat(location, epoch, lambda: (phase, error))
    beat.start()
    try:
        yield beat
    finally:
        beat.stop()


def root_ticked(location: str, timeout: float = 30) -> int:
    """Wait until the root at ``location`` has ticked every event written so far (the writers
    stopped first); its last tick id."""
    with open_node_db(location, readonly=True) as root:
        wait_for(lambda: root.pending()[0] == 0, timeout=timeout, what="the root to tick")
        last = root.last_tick()
    assert last is not None, f"{location} has no tick"
    return last.tick_id


class Ticker(threading.Thread):
    """Runs the root's ticker and watermark publisher, and every node's watermark pull, until
    stopped; follows the root if it moves (switchover, failover)."""

    def __init__(self, cascade: LocalSet, cfg: TickerConfig = TEST_TICKER) -> None:
        super().__init__(daemon=True, name="baton-ticker")
        self.cascade = cascade
        self.cfg = cfg
        self.halt = threading.Event()
        self.ticks = 0

    def run(self) -> None:
        pull = Every(PULL_INTERVAL)
        beats = Every(beat.INTERVAL)
        me = beat.holder()
        while not self.halt.wait(self.cfg.period):
            root = self.cascade.current_root()
            if root is None:
                continue
            try:
                with open_node_db(self.cascade.location(root)) as db:
                    if tick_once(db, self.cfg, time.time()) is not None:
                        self.ticks += 1
                    if pull.due():
                        self.cascade.pull_watermarks()
                    publish_watermark(db)
                    if beats.due():  # the root is served, as a node service says
                        st = db.state()
                        beat.write(db, Beat(me, st.epoch, time.time(), Phase.TICKING))
            except BatonError as exc:
                # A root being switched or killed, or a node database busy: the node services'
                # policy (say it, try again next period), as NodeService.run does.
                log.debug("test ticker waits", extra={"error": describe(exc)})
                continue


class LocalSet:
    """SQLite node databases ``<dir>/<name>.db``, each with an ``accounts`` table."""

    def __init__(
        self, directory: Path, spark: SparkSession, set_name: str = "S", mode: str = MICRO_BATCH
    ) -> None:
        self.dir = Path(directory)
        self.spark = spark
        self.mode = mode
        self.set_name = set_name
        self.roles: dict[str, Role] = {}
        self.dead: set[str] = set()
        self.workers: dict[str, Worker] = {}
        #: A heartbeat per running worker, as a node service writes (switchover checks it).
        self.beats: dict[str, Heartbeat] = {}
        self.epochs: dict[str, int] = {}
        self.ticker = Ticker(self)

    def path(self, name: str) -> Path:
        return self.dir / f"{name}.db"

    def location(self, name: str) -> str:
        return f"sqlite://{self.path(name)}"

    def _create(self, name: str) -> None:
        self.path(name).parent.mkdir(parents=True, exist_ok=True)
        create_accounts(self.path(name))

    def root(self, name: str, ticker: bool = True) -> None:
        """Create root ``name``; ``ticker``: start its ticker now (else :meth:`start_ticker`)."""
        self._create(name)
        commands.create_root(name, self.location(name), self.set_name)
        self.roles[name] = Role.ROOT
        if ticker:
            self.start_ticker()

    def start_ticker(self) -> None:
        if not self.ticker.is_alive():
            self.ticker.start()

    def branch(self, name: str, provider: str) -> None:
        self._subscriber(Role.BRANCH, name, provider)

    def leaf(self, name: str, provider: str) -> None:
        self._subscriber(Role.LEAF, name, provider)

    def _subscriber(self, role: Role, name: str, provider: str) -> None:
        self._create(name)
        commands.create_subscriber(
            role, name, self.location(name), provider, self.location(provider)
        )
        self.roles[name] = role

    def add_table(self, table: str) -> None:
        """Add ``table`` everywhere, root first, then each node after its provider."""
        done: set[str] = set()
        while len(done) < len(self.roles):
            for name in list(self.roles):  # the test may add nodes meanwhile
                if name in done:
                    continue
                with open_node_db(self.location(name)) as db:
                    st = db.state()
                if st.provider is None or st.provider in done:
                    added = commands.add_table(self.location(name), table, name)
                    if added.nodes[0].state == "copying":
                        # What the node's worker does, here at once: copy with Spark.
                        from baton.spark.copy import spark_rows

                        node_ops.copy_table(self.location(name), table, spark_rows(self.spark))
                    done.add(name)

    def cascade(self, via: str | None = None) -> CascadeSet:
        live = via or next(n for n in self.roles if n not in self.dead)
        return CascadeSet(self.location(live))

    def current_root(self) -> str | None:
        for name in list(self.roles):  # the test may add nodes meanwhile
            if name in self.dead:
                continue
            try:
                with open_node_db(self.location(name)) as db:
                    if db.state().role is Role.ROOT:
                        return name
            except BatonError:  # a node being killed or not yet created: not the root now
                continue
        return None

    def state(self, name: str) -> Any:
        with open_node_db(self.location(name)) as db:
            return db.state()

    def start_worker(self, name: str, epoch: int | None = None) -> Worker:
        self.epochs[name] = epoch if epoch is not None else self.epochs.get(name, 0) + 1
        worker = Worker(self.spark, self.location(name), self.epochs[name], mode=self.mode)
        worker.start()
        self.workers[name] = worker
        self.beats[name] = Heartbeat(
            self.location(name), self.epochs[name], lambda: (Phase.APPLYING, "")
        )
        self.beats[name].start()
        return worker

    def start_workers(self) -> None:
        for name in list(self.roles):  # the test may add nodes meanwhile
            if self.state(name).role is not Role.ROOT and name not in self.dead:
                self.start_worker(name)

    def stop_worker(self, name: str) -> None:
        worker = self.workers.pop(name, None)
        if worker is not None:
            worker.close()
        beat = self.beats.pop(name, None)
        if beat is not None:
            beat.stop()

    def check_workers(self) -> None:
        for worker in list(self.workers.values()):
            worker.check()

    def pull_watermarks(self) -> None:
        """What every live node's service does in the background: pull its subscribers'
        watermarks (the test drives workers itself, so a node's worker may not run)."""
        for name in list(self.roles):  # the test may add nodes meanwhile
            if name in self.dead:
                continue
            with open_node_db(self.location(name)) as db:
                if db.state().role.carries_queue:
                    pull_watermarks(db)

    def tables_ok(self, name: str) -> bool:
        """Whether every table ``name`` replicates is copied whole and caught up."""
        with open_node_db(self.location(name)) as db:
            return all(state == "ok" for state in db.tables().values())

    def rows(self, name: str, table: str = "accounts") -> list[tuple[Any, ...]]:
        with open_node_db(self.location(name)) as db:
            return db.read_rows(table)

    def wait_synced(
        self, names: list[str] | None = None, timeout: float = 120.0, upto: int | None = None
    ) -> int:
        """Wait until the root ticked every event and ``names`` (default: every live
        subscriber) applied up to that tick (or up to tick ``upto``) with every table copied
        whole (``ok``); the tick."""
        root = self.current_root()
        if upto is None:
            assert root is not None, "no root"
            with open_node_db(self.location(root)) as db:
                wait_for(lambda: db.pending()[0] == 0, timeout=timeout, what="the root to tick")
                last_tick = db.last_tick()
            assert last_tick is not None
            upto = last_tick.tick_id
        goal = upto
        targets = [n for n in names or self.roles if n not in self.dead and n != root]

        def synced() -> bool:
            self.check_workers()
            return all(self.state(n).position >= goal and self.tables_ok(n) for n in targets)

        wait_for(synced, timeout=timeout, what=f"{targets} to apply tick {goal}")
        return goal

    def close(self) -> None:
        for name in list(self.workers):
            self.stop_worker(name)
        self.ticker.halt.set()
        if self.ticker.is_alive():
            self.ticker.join()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
