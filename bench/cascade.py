"""The cascade benchmark: baton replicating the :mod:`bench.accounts_load` workload root ->
branch -> leaf with its Spark workers, measured exactly as :mod:`bench.londiste` measures
Londiste 3 + PgQ (run in the same process, on the same kind of PostgreSQL server, right after).

Set-up: three node databases, on SQLite (files) or on one PostgreSQL 15 server (three
databases); each node runs :class:`baton.service.node.NodeService` in a thread, as
``baton cascade run`` does: the root's ticker with the default :class:`TickerConfig`, and one
Spark Structured Streaming worker per subscriber, all in one local SparkSession (``local[*]``,
JIT fully on: the quiet test settings that limit the JIT are for tests only).

Measurements:

1. **Throughput.** The branch and the leaf are paused (their queries stop; the root keeps
   capturing and ticking), N changes are generated on the root, then both are resumed and we
   time until the branch, and the leaf, equal the root. events/s = N / leaf time. The time
   includes restarting the two streaming queries (about a second), so it is conservative.
   On PostgreSQL the physical reference follows (:func:`physical_copy`): the rows the run
   left, moved by a plain binary ``COPY`` into an empty table on the leaf's database, and
   baton's fraction of it (the COPY's time over baton's root -> leaf time).
2. **Lag** at a steady 2,000 and 5,000 changes/s: p50/p99/max from a root commit to the first
   probe that sees it on the leaf (:func:`bench.accounts_load.steady`).
3. **Apply efficiency** (PostgreSQL): one large micro-batch (one tick over N changes) read with
   ``format("baton")`` and applied by the sink the workers use (``format("batonapply")``:
   reduce per key, set-wise upsert and delete, position and epoch, one transaction), against a
   plain Spark write of the same rows (a window reduction, JSON parsed by Spark, ``write.jdbc``
   append into an empty table) from the same source; each timed by Spark's own ``addBatch``
   duration. efficiency = plain time / sink time. The same apply as a ``foreachBatch``
   function (:func:`baton.spark.foreach.apply_to`) is timed too, for reference.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psycopg

from baton.cascade import handover, node_ops
from baton.cascade.beat import Heartbeat
from baton.cascade.db import open_node_db
from baton.cascade.model import ROW_TYPES, Role
from baton.cascade.set_ops import CascadeSet, set_paused
from baton.errors import CascadeError, FencedOut
from baton.service.mode import MODES
from baton.service.node import NodeService
from baton.service.worker import MICRO_BATCH
from baton.testing.servers import PostgresServer
from bench import accounts_load
from bench.common import PeakMemory, loadavg, node_locations, step_service, temp_dir

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

NODES = ("root", "branch", "leaf")
JDBC_JAR = Path("/usr/share/java/postgresql.jar")
#: How often a subscriber's service checks its worker (restarts, pause); the ticker steps at
#: its own period.
CHECK_INTERVAL = 0.25
#: Seconds a node service may fail in a row before the benchmark gives up.
SERVICE_PATIENCE = 30.0


def bench_session(directory: Path) -> SparkSession:
    """A local SparkSession for benchmarks: quiet logs, but the JIT and GC at their defaults."""
    from baton.spark.session import build_session

    work = directory / "spark"
    java = f"-Dlog4j2.configurationFile=file:{work / 'log4j2.properties'} -Djava.io.tmpdir={work}"
    conf = {"spark.driver.extraJavaOptions": java, "spark.executor.extraJavaOptions": java}
    if JDBC_JAR.exists():
        conf["spark.jars"] = str(JDBC_JAR)
    return build_session(quiet=True, work_dir=work, conf=conf, app_name="baton-bench")


class BatonSet:
    """root -> branch -> leaf on ``kind`` ("sqlite" or "postgres"), each node's service in a
    thread."""

    def __init__(
        self,
        kind: str,
        directory: Path,
        spark: SparkSession,
        pg: PostgresServer | None = None,
        mode: str = MICRO_BATCH,
    ) -> None:
        self.kind = kind
        self.mode = mode
        self.spark = spark
        self.locations = node_locations(kind, NODES, directory, pg.url if pg else None, "b")
        self.services: dict[str, NodeService] = {}
        self.threads: list[threading.Thread] = []
        self.beats: list[Heartbeat] = []
        self.halt = threading.Event()
        self.errors: list[BaseException] = []

    def target(self, node: str) -> str:
        return self.locations[node]

    def start(self) -> None:
        loc = self.locations
        for n in NODES:
            accounts_load.create_table(loc[n])
        node_ops.create_root("root", loc["root"], "B")
        node_ops.create_subscriber(Role.BRANCH, "branch", loc["branch"], "root", loc["root"])
        node_ops.create_subscriber(Role.LEAF, "leaf", loc["leaf"], "branch", loc["branch"])
        for n in NODES:
            if node_ops.add_table(loc[n], "accounts") == "copying":
                node_ops.copy_table(loc[n], "accounts")  # empty: nothing for Spark to copy
        for n in NODES:
            service = NodeService(loc[n], epoch=1, spark=lambda: self.spark, mode=self.mode)
            self.services[n] = service
            beat = Heartbeat(loc[n], 1, service.phase)  # as NodeService.run beats
            beat.start()
            self.beats.append(beat)
            thread = threading.Thread(
                target=self._run, args=(service,), daemon=True, name=f"bench-{n}"
            )
            thread.start()
            self.threads.append(thread)

    def _run(self, service: NodeService) -> None:
        # The ticker steps at its period; a subscriber's check at CHECK_INTERVAL. A node's role
        # changes in a switchover, and its pace with it. What a node service waits out
        # (NodeService.run's policy): in a switchover the old root's worker may wait a moment
        # for the new root's task slot; a failure that goes on is reported by check().
        step_service(
            service, self.halt, self.errors,
            lambda: service.ticker.period if service.role is Role.ROOT else CHECK_INTERVAL,
            SERVICE_PATIENCE, (CascadeError,), (FencedOut,),
        )  # fmt: skip

    def check(self) -> None:
        if self.errors:
            raise RuntimeError(f"a node service failed: {self.errors[0]}")

    def pause(self, *nodes: str, paused: bool = True) -> None:
        c = CascadeSet(self.locations["root"])
        for n in nodes:
            set_paused(c, n, paused)

    def position(self, node: str) -> int:
        with open_node_db(self.locations[node]) as db:
            return db.state().position

    def stop(self) -> None:
        self.halt.set()
        for t in self.threads:
            t.join(timeout=60)
        for service in self.services.values():
            service.stop()
        for beat in self.beats:
            beat.stop()


@contextlib.contextmanager
def baton_set(
    kind: str, directory: Path, spark: SparkSession, mode: str = MICRO_BATCH
) -> Iterator[BatonSet]:
    with contextlib.ExitStack() as stack:
        pg = None
        if kind == "postgres":
            pg = stack.enter_context(PostgresServer(directory / "pg"))
        s = BatonSet(kind, directory, spark, pg, mode)
        try:
            s.start()
            yield s
        finally:
            s.stop()


def _warm(s: BatonSet, timeout: float = 180) -> None:
    """Wait until both workers run and the leaf applied a tick (the first micro-batch of a
    Python source in a JVM starts its worker pools: seconds, not part of any measurement)."""
    deadline = time.monotonic() + timeout
    while s.position("leaf") < 2 or s.position("branch") < 2:
        s.check()
        if time.monotonic() > deadline:
            raise TimeoutError("the cascade did not start applying")
        time.sleep(0.1)


def throughput(s: BatonSet, changes: int, seed: int) -> dict[str, Any]:
    """Generate ``changes`` on the root while the subscribers are paused, then resume them and
    time until the branch and the leaf equal the root."""
    result = accounts_load.catch_up(
        s.target("root"),
        s.target("branch"),
        s.target("leaf"),
        changes,
        seed=seed,
        stop=lambda: s.pause("branch", "leaf"),
        start=lambda: s.pause("branch", "leaf", paused=False),
    )
    s.check()
    out: dict[str, Any] = {**result, "loadavg": loadavg()}
    if s.kind == "postgres":
        physical = physical_copy(s.target("root"), s.target("leaf"))
        # baton's fraction of the physical reference: a plain COPY's time over baton's.
        physical["baton_fraction"] = physical["seconds"] / result["root_to_leaf_s"]
        out["physical"] = physical
    return out


def physical_copy(source: str, target: str) -> dict[str, float]:
    """The physical reference for a throughput run on PostgreSQL: the rows the run left in
    ``accounts`` (the root's, which the leaf now equals), moved by a plain binary ``COPY`` out
    of the source database and into an empty table of the same definition (primary key
    included) in the target's, as one transaction: what moving the result costs with no
    replication at all. Timed from the first byte read to the commit; the table is dropped
    after."""
    with psycopg.connect(source) as src, psycopg.connect(target) as dst:
        dst.execute("DROP TABLE IF EXISTS physical_copy")
        dst.execute("CREATE TABLE physical_copy (LIKE accounts INCLUDING ALL)")
        dst.commit()
        rows = 0
        t0 = time.monotonic()
        with (
            src.cursor() as out,
            out.copy("COPY accounts TO STDOUT (FORMAT BINARY)") as reading,
            dst.cursor() as into,
            into.copy("COPY physical_copy FROM STDIN (FORMAT BINARY)") as writing,
        ):
            for block in reading:
                writing.write(block)
        dst.commit()
        seconds = time.monotonic() - t0
        row = dst.execute("SELECT count(*) FROM physical_copy").fetchone()
        rows = int(row[0]) if row else 0
        dst.execute("DROP TABLE physical_copy")
        dst.commit()
    return {"rows": rows, "seconds": seconds, "rows_per_s": rows / seconds}


def lag(s: BatonSet, rates: tuple[int, ...], seconds: float) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for i, rate in enumerate(rates):
        accounts_load.wait_equal(s.target("root"), s.target("leaf"), 300)
        result: dict[str, Any] = dict(
            accounts_load.steady(s.target("root"), s.target("leaf"), rate, seconds, seed=10 + i)
        )
        result["loadavg"] = loadavg()
        out[str(rate)] = result
        s.check()
    return out


def switchover(s: BatonSet, trials: int, rate: int = 2000) -> dict[str, Any]:
    """Planned switchovers (``handover.switchover``, what ``baton cascade switchover`` runs)
    under a steady writer: :func:`bench.accounts_load.switchovers`."""

    def switch(old: str, new: str) -> None:
        handover.switchover(CascadeSet(s.target(old)), new, timeout=60)
        s.check()

    return accounts_load.switchovers(s.target, switch, trials, rate)


# -- apply efficiency -----------------------------------------------------------------------


def _plain_write(df: DataFrame, jdbc_url: str, table: str) -> None:
    """The same rows as the sink writes, written the plain Spark way: reduce per key (a
    window), parse the JSON row images with Spark, append over JDBC."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    schema = "id long, balance long, name string, updated_at double"
    last_first = Window.partitionBy("ev_table", "ev_key").orderBy(F.col("ev_id").desc())
    rows = (
        df.where(F.col("ev_type").isin(*sorted(ROW_TYPES)))
        .withColumn("_n", F.row_number().over(last_first))
        .where((F.col("_n") == 1) & (F.col("ev_type") != "D"))
        .select(F.from_json("ev_data", schema).alias("r"))
        .select("r.*")
    )
    rows.write.jdbc(jdbc_url, table, mode="append", properties={"driver": "org.postgresql.Driver"})


def apply_efficiency(spark: SparkSession, directory: Path, changes: int) -> dict[str, Any]:
    """One micro-batch of ``changes`` from a PostgreSQL root applied to a PostgreSQL leaf by
    the sink, then the same source written plainly by Spark; both timed."""
    from baton.spark.foreach import apply_to

    if not JDBC_JAR.exists():
        raise RuntimeError(f"{JDBC_JAR} is missing: apt-get install libpostgresql-jdbc-java")
    with PostgresServer(directory / "pg-eff") as pg:
        base = pg.url.rsplit("/", 1)[0]
        with psycopg.connect(pg.url, autocommit=True) as admin:
            for n in ("e_root", "e_leaf"):
                admin.execute(f"CREATE DATABASE {n}")
        root, leaf = f"{base}/e_root", f"{base}/e_leaf"
        for loc in (root, leaf):
            accounts_load.create_table(loc)
        with psycopg.connect(leaf, autocommit=True) as conn:
            conn.execute("CREATE TABLE plain (LIKE accounts)")
        node_ops.create_root("r", root, "E")
        node_ops.create_subscriber(Role.LEAF, "l", leaf, "r", root)
        node_ops.add_table(root, "accounts")
        node_ops.add_table(leaf, "accounts")
        node_ops.copy_table(leaf, "accounts")
        with open_node_db(root) as db, db.transaction() as cur:
            db.make_tick(cur)  # the leaf's start
        accounts_load.generate(root, changes, seed=3)
        with open_node_db(root) as db, db.transaction() as cur:
            db.make_tick(cur)  # one batch over every change
        port = pg.port
        jdbc_url = f"jdbc:postgresql://127.0.0.1:{port}/e_leaf?user=postgres"
        before = _tick_before_last(root)

        def source(subscriber: bool) -> DataFrame:
            reader = spark.readStream.format("baton").option("provider", root)
            if subscriber:
                reader = reader.option("subscriber", leaf)
            else:
                reader = reader.option("startingTick", str(before))
            return reader.option("maxEvents", str(changes * 2)).load()

        def reset_leaf() -> None:
            with psycopg.connect(leaf, autocommit=True) as conn:
                conn.execute("DELETE FROM accounts")
            with open_node_db(leaf) as db, db.transaction() as cur:
                db.set_local(cur, "position", str(before))

        # Each is run twice and the faster run kept: the first run of a kind in a JVM loads
        # classes (the JDBC driver) and starts Python workers.
        sinks, plains = [], []
        for run in range(2):
            reset_leaf()
            # 1. The sink baton's workers use: the micro-batch applied in a Spark Python worker.
            sinks.append(
                _micro_batch_seconds(
                    source(True)
                    .writeStream.format("batonapply")
                    .option("subscriber", leaf)
                    .option("epoch", "1")
                    .option("checkpointLocation", str(directory / f"eff-sink-{run}")),
                    changes,
                )
            )
            # 2. The plain Spark write of the same rows from the same source.
            with psycopg.connect(leaf, autocommit=True) as conn:
                conn.execute("DELETE FROM plain")
            plains.append(
                _micro_batch_seconds(
                    source(False)
                    .writeStream.foreachBatch(lambda df, _: _plain_write(df, jdbc_url, "plain"))
                    .option("checkpointLocation", str(directory / f"eff-plain-{run}")),
                    changes,
                )
            )
        sink_s, plain_s = min(sinks), min(plains)
        equal = accounts_load.signature(root) == accounts_load.signature(leaf)
        with psycopg.connect(leaf) as conn:
            row = conn.execute("SELECT count(*) FROM plain").fetchone()
        plain_rows = row[0] if row else 0
        # 3. The same apply as a foreachBatch function (rows through the driver), for reference.
        reset_leaf()
        foreach_s = _micro_batch_seconds(
            source(True)
            .writeStream.foreachBatch(apply_to(leaf, epoch=1))
            .option("checkpointLocation", str(directory / "eff-foreach")),
            changes,
        )
        # 4. The low-latency mode's step (what its Spark task runs for each batch: read, reduce,
        # apply in one transaction), timed in this process, the faster of two runs.
        steps = []
        for _ in range(2):
            reset_leaf()
            steps.append(_low_latency_step_seconds(root, leaf, changes))
        task_equal = accounts_load.signature(root) == accounts_load.signature(leaf)
    return {
        "changes": changes,
        "sink_s": sink_s,
        "sink_changes_per_s": changes / sink_s,
        "plain_s": plain_s,
        "plain_rows": plain_rows,
        "foreach_batch_s": foreach_s,
        "low_latency_step_s": min(steps),
        "low_latency_efficiency": plain_s / min(steps),
        "low_latency_leaf_equals_root": task_equal,
        "runs": {"sink_s": sinks, "plain_s": plains},
        "efficiency": plain_s / sink_s,
        "leaf_equals_root": equal,
        "loadavg": loadavg(),
    }


def _low_latency_step_seconds(root: str, leaf: str, changes: int) -> float:
    from baton.cascade.batches import Outcome
    from baton.service.task import Follow, step

    spec = Follow(leaf, "r", root, epoch=1, max_events=changes * 2)
    with open_node_db(leaf) as db, open_node_db(root, readonly=True) as src:
        t0 = time.monotonic()
        done = step(db, src, spec)
        seconds = time.monotonic() - t0
    if done is not Outcome.APPLIED:
        raise RuntimeError(f"the low-latency step applied nothing: {done}")
    return seconds


def _tick_before_last(location: str) -> int:
    with open_node_db(location) as db:
        last = db.last_tick()
    assert last is not None
    return last.tick_id - 1


def _micro_batch_seconds(writer: Any, changes: int) -> float:
    """Start ``writer``, wait for its micro-batch with rows, stop it; that micro-batch's
    ``addBatch`` time by Spark's progress report (reading the source is part of it; starting
    the query is not)."""
    query = writer.start()
    try:
        deadline = time.monotonic() + max(300.0, changes / 1000)
        while True:
            for progress in query.recentProgress:
                if progress.numInputRows > 0:
                    return float(progress.durationMs["addBatch"]) / 1000
            if not query.isActive:
                raise RuntimeError(f"the measuring query failed: {query.exception()}")
            if time.monotonic() > deadline:
                raise TimeoutError("the large micro-batch was not processed in time")
            time.sleep(0.1)
    finally:
        query.stop()


# -- the whole benchmark -------------------------------------------------------------------


def cascade_bench(
    quick: bool,
    kinds: tuple[str, ...] = ("sqlite", "postgres"),
    efficiency: bool = True,
    modes: tuple[str, ...] = MODES,
) -> dict[str, Any]:
    """Throughput and lag on each of ``kinds`` in each worker mode (results under the kind's
    name for micro-batches, ``"<kind>, low-latency"`` for the other), then the apply
    efficiency; one Spark JVM."""
    changes = 100_000 if quick else 1_000_000
    seconds = 10.0 if quick else 30.0
    out: dict[str, Any] = {"system": "baton", "quick": quick, "loadavg_start": loadavg()}
    with temp_dir("cascade") as directory:
        spark = bench_session(directory)
        try:
            for kind in kinds:
                for mode in modes:
                    key = kind if mode == MICRO_BATCH else f"{kind}, {mode}"
                    say(f"cascade: {key}")
                    where = directory / f"{kind}-{mode}"
                    with PeakMemory() as memory, baton_set(kind, where, spark, mode) as s:
                        _warm(s)
                        result: dict[str, Any] = {"mode": mode}
                        say(f"  throughput: {changes:,} changes written, then caught up")
                        moved = result["throughput"] = throughput(s, changes, seed=1)
                        say(f"  throughput: {moved['events_per_s']:,.0f} events/s root -> leaf")
                        say(f"  lag: {seconds:g} s at 2,000 and at 5,000 changes/s")
                        lags = result["lag"] = lag(s, (2000, 5000), seconds)
                        for rate, one in lags.items():
                            say(
                                f"  lag at {rate}/s: p50 {one['p50']:.3f} s, p99 {one['p99']:.3f} s"
                            )
                        switched = result["switchover"] = switchover(s, 2 if quick else 4)
                        say(f"  switchover: p50 {switched['to_new_root_write_p50']:.2f} s to write")
                        result["leaf_equals_root"] = accounts_load.signature(
                            s.target("leaf")
                        ) == accounts_load.signature(s.target("root"))
                    result["memory"] = memory.result()
                    out[key] = result
            if efficiency:
                say("cascade: apply efficiency")
                out["efficiency"] = apply_efficiency(
                    spark, directory, 100_000 if quick else 500_000
                )
        finally:
            spark.stop()
    return out


def say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.cascade", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="100,000 changes, 10 s lag runs")
    parser.add_argument("--kind", action="append", choices=("sqlite", "postgres"))
    parser.add_argument("--no-efficiency", action="store_true")
    parser.add_argument("--mode", action="append", choices=MODES)
    parser.add_argument(
        "--efficiency-only", action="store_true", help="only the apply efficiency measurement"
    )
    parser.add_argument("--verbose", action="store_true", help="log every micro-batch")
    args = parser.parse_args(argv)
    if args.verbose:
        import logging

        from baton import logs

        logs.setup(logging.WARNING)
        logging.getLogger("baton.cascade").setLevel(logging.DEBUG)
    kinds = () if args.efficiency_only else tuple(args.kind or ("sqlite", "postgres"))
    result = cascade_bench(args.quick, kinds, not args.no_efficiency, tuple(args.mode or MODES))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
