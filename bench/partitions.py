"""The partition benchmark (seed 004's complex case): four partition sets A-D, each a root with
a writer, merged by S1 (the combined root, four merge-leaves) into one combined set, S2 its
combined-failover (a branch with four tracking merge-leaves) and S3 a branch of S1. Every node
runs :class:`baton.service.node.NodeService` in a thread of this process (as ``baton cascade
run`` does), all workers in one local SparkSession in low-latency mode.

Measured (``--kind sqlite`` or ``postgres``: every node database of that kind):

1. **Lag**: each partition's writer commits transactions of ``tx_size`` changes at ``rate``
   changes per second (four writers: 4 x ``rate`` in all); a prober reads S3 every 10 ms and a
   transaction counts as seen when S3's highest id of its partition reaches the highest id it
   inserted (ids only grow per partition, and a merge applies a partition batch atomically and
   in order, so S3 holding it means it holds the transaction). p50/p99/max from the partition
   commit to S3.
2. **Combined throughput**: S1's merge-leaves paused, ``burst`` changes written into each
   partition, the merge-leaves resumed: the time until S3 equals the union of the four
   partitions. changes/s = 4 x ``burst`` / that time.
"""

from __future__ import annotations

import argparse
import json
import random
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from baton.cascade import merge, node_ops
from baton.cascade.db import open_node_db
from baton.cascade.model import Role
from baton.cascade.set_ops import CascadeSet, set_paused
from baton.errors import CascadeError, FencedOut
from baton.service.node import NodeService
from baton.service.worker import LOW_LATENCY
from baton.testing.servers import PostgresServer
from bench import accounts_load
from bench.common import PeakMemory, loadavg, node_locations, quantile, step_service, temp_dir

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

PARTS = "abcd"
#: Ids of partition i (1-based) are ``i * SPAN + n``: no two partitions share a key.
SPAN = 10**9
#: Low-latency workers in one session: four merges, S2's and S3's (tracking ones hold none).
SLOTS = 8


class PartitionSets:
    """A1-D1 -> S1 (merge-leaves A2-D2) -> S2 (A3-D3, tracking), S3, each node's service in a
    thread."""

    def __init__(self, kind: str, directory: Path, spark: SparkSession, pg: PostgresServer | None):
        names = [f"{p}1" for p in PARTS] + ["s1", "s2", "s3"]
        self.loc = node_locations(kind, names, directory, pg.url if pg else None, "p")
        self.spark = spark
        self.halt = threading.Event()
        self.errors: list[BaseException] = []
        self.services: list[NodeService] = []
        self.threads: list[threading.Thread] = []

    def merge_leaf(self, part: str, host: str) -> str:
        return merge.merge_location(self.loc[host], part.upper())

    def build(self) -> None:
        loc = self.loc
        for location in loc.values():
            accounts_load.create_table(location)
        for p in PARTS:
            node_ops.create_root(f"{p}1", loc[f"{p}1"], p.upper())
            node_ops.add_table(loc[f"{p}1"], "accounts")
        node_ops.create_root("s1", loc["s1"], "S")
        node_ops.add_table(loc["s1"], "accounts")
        for n in ("s2", "s3"):
            node_ops.create_subscriber(Role.BRANCH, n, loc[n], "s1", loc["s1"])
            node_ops.add_table(loc[n], "accounts")
            node_ops.copy_table(loc[n], "accounts")  # empty: nothing for Spark to copy
        for p in PARTS:
            for n, host in (("2", "s1"), ("3", "s2")):
                merge.create_merge_leaf(f"{p}{n}", loc[host], f"{p}1", loc[f"{p}1"])
                location = self.merge_leaf(p, host)
                if node_ops.add_table(location, "accounts") == "copying" and host == "s1":
                    node_ops.copy_table(location, "accounts")

    def start(self) -> None:
        locations = [
            *(self.loc[f"{p}1"] for p in PARTS),
            self.loc["s1"],
            *(self.merge_leaf(p, "s1") for p in PARTS),
            self.loc["s2"],
            *(self.merge_leaf(p, "s2") for p in PARTS),
            self.loc["s3"],
        ]
        for location in locations:
            service = NodeService(location, epoch=1, spark=lambda: self.spark, mode=LOW_LATENCY)
            self.services.append(service)
            thread = threading.Thread(target=self._run, args=(service,), daemon=True)
            thread.start()
            self.threads.append(thread)

    def _run(self, service: NodeService) -> None:
        step_service(
            service, self.halt, self.errors,
            lambda: service.ticker.period if service.role is Role.ROOT else 0.25,
            60.0, (CascadeError,), (FencedOut,),
        )  # fmt: skip

    def check(self) -> None:
        if self.errors:
            raise RuntimeError(f"a node service failed: {self.errors[0]}")

    def position(self, location: str) -> int:
        with open_node_db(location) as db:
            return db.state().position

    def pause_merges(self, paused: bool) -> None:
        for p in PARTS:
            set_paused(CascadeSet(self.loc[f"{p}1"]), f"{p}2", paused)

    def stop(self) -> None:
        self.halt.set()
        for t in self.threads:
            t.join(timeout=60)
        for service in self.services:
            service.stop()


@contextmanager
def partition_sets(kind: str, directory: Path) -> Iterator[PartitionSets]:
    from baton.spark.session import build_session

    with ExitStack() as stack:
        pg = stack.enter_context(PostgresServer(directory / "pg")) if kind == "postgres" else None
        work = directory / "spark"
        spark = build_session(
            master=f"local[{SLOTS}]", quiet=True, work_dir=work, app_name="baton-partitions"
        )
        stack.callback(spark.stop)
        s = PartitionSets(kind, directory / "nodes", spark, pg)
        s.build()
        s.start()
        try:
            yield s
        finally:
            s.stop()


def _warm(s: PartitionSets, timeout: float = 240) -> None:
    """Every merge-leaf of S1 and S3 applied a few ticks (the workers' first steps)."""
    deadline = time.monotonic() + timeout
    nodes = [s.merge_leaf(p, "s1") for p in PARTS] + [s.loc["s3"]]
    start = {n: s.position(n) for n in nodes}
    while any(s.position(n) < start[n] + 3 for n in nodes):
        s.check()
        if time.monotonic() > deadline:
            raise TimeoutError("the partition sets did not start merging")
        time.sleep(0.2)


class _PartitionWriter(threading.Thread):
    """Transactions of ``tx_size`` changes at ``rate`` changes/s into one partition; records
    (highest inserted id, commit time) of each."""

    def __init__(  # noqa: PLR0917
        self, target: str, index: int, rate: float, seconds: float, tx_size: int,
        record: Callable[[int, int, float], None],
    ) -> None:  # fmt: skip
        super().__init__(daemon=True)
        self.target, self.index, self.rate, self.seconds = target, index, rate, seconds
        self.tx_size, self.record = tx_size, record
        self.changes = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        writer = accounts_load._Writer(self.target)
        try:
            live, next_id = writer.state()
            next_id = max(next_id, self.index * SPAN)
            rng = random.Random(self.index)
            sizes = iter(lambda: self.tx_size, 0)
            interval = self.tx_size / self.rate
            t0 = time.monotonic()
            for n, txn in enumerate(
                accounts_load.plan(rng, live, next_id, sizes, force_insert=True)
            ):
                due = t0 + n * interval
                if due >= t0 + self.seconds:
                    break
                if (delay := due - time.monotonic()) > 0:
                    time.sleep(delay)
                writer.apply(txn)
                assert txn.max_inserted is not None
                self.record(self.index, txn.max_inserted, time.time())
                self.changes += txn.size
        except BaseException as exc:  # reported by the caller
            self.error = exc
        finally:
            writer.close()


def lag(s: PartitionSets, rate: float, seconds: float, tx_size: int = 50) -> dict[str, Any]:
    """Four writers at ``rate`` changes/s each; lag from each commit to S3 (see the module)."""
    return measure_lag([s.loc[f"{p}1"] for p in PARTS], s.loc["s3"], rate, seconds, tx_size,
                       s.check)  # fmt: skip


def measure_lag(  # noqa: PLR0917
    partitions: list[str],
    combined: str,
    rate: float,
    seconds: float,
    tx_size: int = 50,
    check: Callable[[], None] = lambda: None,
) -> dict[str, Any]:
    """One writer per partition database in ``partitions`` (partition i, 1-based, writes ids
    from ``i * SPAN``) at ``rate`` changes/s each, transactions of ``tx_size`` changes; the lag
    from each commit to the first probe of ``combined`` (every 10 ms) that shows it. ``check``
    is called at each probe (raise to give up). Shared with the Londiste 3 reference."""
    pending: dict[int, deque[tuple[int, float]]] = {
        i: deque() for i in range(1, len(partitions) + 1)
    }
    lock = threading.Lock()
    lags: list[float] = []

    def record(index: int, top: int, committed: float) -> None:
        with lock:
            pending[index].append((top, committed))

    writers = [
        _PartitionWriter(target, i, rate, seconds, tx_size, record)
        for i, target in enumerate(partitions, start=1)
    ]
    mark = "%s" if combined.startswith("postgres") else "?"
    top_sql = f"SELECT coalesce(max(id), -1) FROM accounts WHERE id >= {mark} AND id < {mark}"
    reader = accounts_load.Reader(combined)
    t0 = time.monotonic()
    for w in writers:
        w.start()
    try:
        drain_deadline: float | None = None
        while True:
            tops = {
                i: int(reader.conn.execute(top_sql, (i * SPAN, (i + 1) * SPAN)).fetchone()[0])
                for i in pending
            }
            now = time.time()
            with lock:
                for i, queue in pending.items():
                    while queue and queue[0][0] <= tops[i] and queue[0][1] <= now:
                        lags.append(now - queue.popleft()[1])
                left = sum(len(q) for q in pending.values())
            if not any(w.is_alive() for w in writers):
                if left == 0:
                    break
                drain_deadline = drain_deadline or time.monotonic() + 60
                if time.monotonic() > drain_deadline:
                    break
            check()
            time.sleep(0.01)
    finally:
        reader.close()
    for w in writers:
        w.join()
        if w.error is not None:
            raise w.error
    elapsed = time.monotonic() - t0
    changes = sum(w.changes for w in writers)
    return {
        "rate_per_partition": rate,
        "achieved_rate": changes / min(elapsed, seconds + 1e-9) if elapsed else 0.0,
        "changes": changes,
        "samples": len(lags),
        "unseen": left,
        "p50": quantile(lags, 0.5),
        "p99": quantile(lags, 0.99),
        "max": max(lags, default=float("nan")),
    }


def throughput(s: PartitionSets, burst: int, timeout: float = 600) -> dict[str, float]:
    """S1's merge-leaves paused, ``burst`` changes per partition, resumed: the time until S3
    equals the union of the partitions."""
    partitions = [s.loc[f"{p}1"] for p in PARTS]
    return measure_burst(partitions, s.loc["s3"], burst, s.pause_merges, s.check, timeout)


def measure_burst(  # noqa: PLR0917
    partitions: list[str],
    combined: str,
    burst: int,
    pause: Callable[[bool], None],
    check: Callable[[], None] = lambda: None,
    timeout: float = 600,
) -> dict[str, float]:
    """``pause(True)`` (the merging stops), ``burst`` changes written into each partition
    (transactions of 500), ``pause(False)``: seconds until ``combined`` equals the union of
    the partitions, and changes/s. Shared with the Londiste 3 reference."""
    pause(True)
    for i, target in enumerate(partitions, start=1):
        writer = accounts_load._Writer(target)
        try:
            live, next_id = writer.state()
            rng = random.Random(100 + i)
            sizes = iter([500] * (burst // 500))
            for txn in accounts_load.plan(rng, live, max(next_id, i * SPAN), sizes):
                writer.apply(txn)
        finally:
            writer.close()
    union: set[tuple[int, int]] = set()
    for target in partitions:
        reader = accounts_load.Reader(target)
        try:
            union |= {(int(r[0]), int(r[1])) for r in reader.rows()}
        finally:
            reader.close()
    t0 = time.monotonic()
    pause(False)
    reader = accounts_load.Reader(combined)
    try:
        while {(int(r[0]), int(r[1])) for r in reader.rows()} != union:
            check()
            if time.monotonic() - t0 > timeout:
                raise TimeoutError("the combined node did not catch up")
            time.sleep(0.05)
    finally:
        reader.close()
    seconds = time.monotonic() - t0
    total = len(partitions) * (burst // 500) * 500
    return {"changes": total, "seconds": seconds, "per_s": total / seconds}


def partitions_bench(
    kind: str, rate: float = 1000, seconds: float = 30, burst: int = 25_000
) -> dict[str, Any]:
    with temp_dir("baton-partitions-") as directory, PeakMemory() as memory:
        with partition_sets(kind, directory) as s:
            _warm(s)
            result: dict[str, Any] = {"kind": kind, "load_before": loadavg()}
            result["lag"] = lag(s, rate, seconds)
            result["throughput"] = throughput(s, burst)
        result["memory"] = memory.result()
    return result


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kind", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--rate", type=float, default=1000, help="changes/s per partition")
    parser.add_argument("--seconds", type=float, default=30)
    parser.add_argument("--burst", type=int, default=25_000, help="changes per partition")
    args = parser.parse_args(argv)
    print(json.dumps(partitions_bench(args.kind, args.rate, args.seconds, args.burst), indent=2))


if __name__ == "__main__":
    main()
