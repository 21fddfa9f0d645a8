"""Where a cascade hop's time goes (issue 15, step 1).

``python -m bench.hops [--kind sqlite|postgres] [--rate 5000] [--seconds 20]`` prints JSON with:

1. **The floor**: the fixed cost of one micro-batch in this Spark, with a Python source that has
   one new row at every trigger (``batonfloor``, :mod:`bench.floor_source`) written to Spark's
   ``noop`` sink, and to a Python sink that does nothing. Batches per second and the p50 of
   each ``durationMs`` part (latestOffset, queryPlanning, walCommit, addBatch, commitOffsets,
   triggerExecution).
2. **baton's hops**: the root -> branch -> leaf cascade under a steady writer at ``rate``
   changes/s; every micro-batch of the branch's and the leaf's worker (their queries' progress
   reports, polled) with the same parts, the rows per batch, and the lag root -> leaf.
3. **The Python parts alone**, outside Spark: one ``latestOffset`` of the ``baton`` source (what
   every idle poll costs) and one apply of a typical micro-batch (decode, reduce, apply, position
   and epoch in one transaction) on the kind's node database.
"""

from __future__ import annotations

import argparse
import json
import os
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from baton.service.mode import MODES
from baton.service.worker import MICRO_BATCH
from bench import accounts_load
from bench.cascade import _warm, baton_set, bench_session
from bench.common import REPO, loadavg, quantile, temp_dir

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

PARTS = (
    "latestOffset",
    "queryPlanning",
    "walCommit",
    "addBatch",
    "commitOffsets",
    "triggerExecution",
)


def _summary(progress: list[dict[str, Any]]) -> dict[str, Any]:
    """p50 / p99 (ms) of each part over the micro-batches in ``progress``."""
    out: dict[str, Any] = {"batches": len(progress)}
    for part in PARTS:
        values = [float(p["durationMs"].get(part, 0)) for p in progress]
        out[part] = {
            "p50": round(quantile(values, 0.5), 1),
            "p99": round(quantile(values, 0.99), 1),
        }
    rows = [float(p["numInputRows"]) for p in progress]
    out["rows_p50"] = quantile(rows, 0.5)
    return out


class Collector:
    """Polls queries' progress reports (Spark keeps the last 100) so none is missed."""

    def __init__(self, queries: dict[str, Any]) -> None:
        self.queries = queries  # name -> callable returning the current query or None
        self.seen: dict[str, dict[tuple[str, int], dict[str, Any]]] = defaultdict(dict)
        self.halt = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True, name="hops-collector")

    def __enter__(self) -> Collector:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.halt.set()
        self.thread.join(timeout=10)
        self._poll()

    def _poll(self) -> None:
        for name, get in self.queries.items():
            query = get()
            if query is None:
                continue
            try:
                for p in query.recentProgress:
                    key = (p.id, p.batchId)
                    self.seen[name][key] = {
                        "durationMs": dict(p.durationMs),
                        "numInputRows": p.numInputRows,
                    }
            except Exception:  # a query being restarted: the next poll sees the new one
                continue

    def _run(self) -> None:
        while not self.halt.wait(0.5):
            self._poll()

    def nonempty(self, name: str) -> list[dict[str, Any]]:
        return [p for p in self.seen[name].values() if p["numInputRows"] > 0]


def floor(spark: SparkSession, directory: Path, seconds: float) -> dict[str, Any]:
    """The fixed cost of a micro-batch: a one-row Python source into ``noop`` and into a
    Python sink that does nothing."""
    from bench.floor_source import register

    register(spark)
    out: dict[str, Any] = {}
    for sink in ("noop", "batonfloornull"):
        query: StreamingQuery = (
            spark.readStream.format("batonfloor")
            .load()
            .writeStream.format(sink)
            .option("checkpointLocation", str(directory / f"floor-{sink}"))
            .trigger(processingTime="0 seconds")
            .start()
        )
        with Collector({sink: lambda q=query: q}) as c:
            # Warm up (the first Python-source batches start worker pools), then measure.
            deadline = time.monotonic() + 120
            while query.lastProgress is None or query.lastProgress.batchId < 5:
                if time.monotonic() > deadline or not query.isActive:
                    raise RuntimeError(f"the floor query did not run: {query.exception()}")
                time.sleep(0.1)
            first = query.lastProgress.batchId
            start = time.monotonic()
            time.sleep(seconds)
            last = query.lastProgress.batchId
            elapsed = time.monotonic() - start
        query.stop()
        batches = [p for p in c.nonempty(sink)][5:]
        out[sink] = {**_summary(batches), "batches_per_s": round((last - first) / elapsed, 2)}
    return out


def python_parts(kind: str, locations: dict[str, str], rounds: int = 200) -> dict[str, Any]:
    """One idle ``latestOffset`` of the source on the branch (reading the root), timed."""
    from baton.spark.source import BatonStreamReader

    reader = BatonStreamReader({"provider": locations["root"], "subscriber": locations["branch"]})
    start = reader.initialOffset()
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        reader.latestOffset(start)
        times.append(time.perf_counter() - t0)
    return {
        "latest_offset_ms": {
            "p50": round(quantile(times, 0.5) * 1000, 2),
            "p99": round(quantile(times, 0.99) * 1000, 2),
        }
    }


def hops(
    spark: SparkSession, kind: str, directory: Path, rate: int, seconds: float, *, mode: str
) -> dict[str, Any]:
    """The cascade under a steady writer; every micro-batch of both workers."""
    with baton_set(kind, directory / f"{kind}-{mode}", spark, mode) as s:
        _warm(s)

        def query_of(node: str) -> Any:
            worker = s.services[node].worker
            return worker.query if worker is not None else None

        queries = {n: (lambda n=n: query_of(n)) for n in ("branch", "leaf")}
        with Collector(queries) as c:
            lag = accounts_load.steady(s.target("root"), s.target("leaf"), rate, seconds, seed=5)
        s.check()
        out: dict[str, Any] = {"lag": lag, "loadavg": loadavg()}
        for n in ("branch", "leaf"):
            out[n] = _summary(c.nonempty(n))
        out["python"] = python_parts(kind, s.locations)
    return out


def hops_bench(
    kinds: tuple[str, ...] = ("sqlite",),
    modes: tuple[str, ...] = (MICRO_BATCH,),
    rate: int = 5000,
    seconds: float = 20.0,
    with_floor: bool = True,
) -> dict[str, Any]:
    """The floor and each kind's hops in each mode, in one Spark session of its own."""
    # Spark's Python workers import the floor source from the repository (bench is not
    # installed): they inherit the JVM's environment, which inherits this one.
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p
    )
    result: dict[str, Any] = {"loadavg_start": loadavg()}
    with temp_dir("hops") as directory:
        spark = bench_session(directory)
        try:
            if with_floor:
                result["floor"] = floor(spark, directory, min(seconds, 10.0))
            for kind in kinds:
                for mode in modes:
                    result[f"{kind}/{mode}"] = hops(
                        spark, kind, directory, rate, seconds, mode=mode
                    )
        finally:
            spark.stop()
    return result


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.hops", description=__doc__)
    parser.add_argument("--kind", action="append", choices=("sqlite", "postgres"))
    parser.add_argument("--rate", type=int, default=5000)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--no-floor", action="store_true")
    parser.add_argument("--mode", action="append", choices=MODES)
    args = parser.parse_args(argv)
    result = hops_bench(
        tuple(args.kind or ("sqlite",)),
        tuple(args.mode or (MICRO_BATCH,)),
        args.rate,
        args.seconds,
        not args.no_floor,
    )
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
