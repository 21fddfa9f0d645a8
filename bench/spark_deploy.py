"""The cascade on three Spark deployments, side by side in one run: ``local[2]``, a standalone
cluster of two one-core workers, and Spark Connect (a server running ``local[2]``), all on this
host (so they should be close: the point is that the numbers exist and the paths work).

Each deployment runs in a process of its own (one Spark driver per process), with the cascade
of :mod:`bench.cascade` (root -> branch -> leaf on SQLite, each node's service in a thread,
micro-batch workers: the one mode every deployment has) and its measurements:

1. **Throughput**: the subscribers paused, N changes generated at the root, resumed; events/s
   = N / time until the leaf equals the root (:func:`bench.cascade.throughput`).
2. **Lag** at a steady 2,000 changes/s: p50/p99/max from a root commit to the leaf
   (:func:`bench.cascade.lag`).

The JIT runs at its defaults in the drivers (the quiet settings that limit it are for tests).

    python -m bench.spark_deploy [--changes 50000] [--seconds 20]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench import accounts_load
from bench.cascade import _warm, baton_set, lag, throughput
from bench.common import PeakMemory, loadavg, temp_dir

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

DEPLOYMENTS = ("local[2]", "standalone", "connect")


@contextlib.contextmanager
def deployment(name: str, directory: Path) -> Iterator[SparkSession]:
    """A session on deployment ``name``, its servers started in ``directory`` and stopped
    after."""
    from baton.spark.session import build_session
    from baton.testing.spark_servers import ConnectServer, StandaloneCluster

    work = directory / "driver"
    work.mkdir(parents=True, exist_ok=True)
    java = f"-Dlog4j2.configurationFile=file:{work / 'log4j2.properties'} -Djava.io.tmpdir={work}"
    conf = {"spark.driver.extraJavaOptions": java}
    with contextlib.ExitStack() as stack:
        if name == "local[2]":
            spark = build_session(master="local[2]", quiet=True, work_dir=work, conf=conf)
        elif name == "standalone":
            cluster = stack.enter_context(StandaloneCluster(directory / "cluster", workers=2))
            spark = build_session(master=cluster.url, quiet=True, work_dir=work, conf=conf)
        elif name == "connect":
            server = stack.enter_context(ConnectServer(directory / "connect", master="local[2]"))
            spark = build_session(remote=server.url, quiet=True, work_dir=work)
        else:
            raise ValueError(f"unknown deployment {name!r}: use one of {DEPLOYMENTS}")
        try:
            yield spark
        finally:
            spark.stop()


def measure(
    name: str, changes: int, seconds: float, *, mode: str = "micro-batch",
    kind: str = "sqlite", rate: int = 2000,
) -> dict[str, Any]:  # fmt: skip
    """Throughput and lag of the cascade on deployment ``name``."""
    with temp_dir("spark-deploy") as directory:
        started = time.monotonic()
        with deployment(name, directory) as spark:
            ready = time.monotonic() - started
            with PeakMemory() as memory, baton_set(kind, directory / "set", spark, mode) as s:
                t0 = time.monotonic()
                _warm(s)
                warm = time.monotonic() - t0
                result: dict[str, Any] = {
                    "deployment": name,
                    "mode": mode,
                    "kind": kind,
                    "rate": rate,
                    "session_s": ready,
                    "first_batches_s": warm,
                    "throughput": throughput(s, changes, seed=1),
                    "lag": lag(s, (rate,), seconds),
                }
                result["leaf_equals_root"] = accounts_load.signature(
                    s.target("leaf")
                ) == accounts_load.signature(s.target("root"))
            result["memory"] = memory.result()
    return result


def run_all(
    changes: int, seconds: float, names: tuple[str, ...] = DEPLOYMENTS,
    extra: tuple[str, ...] = (),
) -> dict[str, Any]:  # fmt: skip
    """Each deployment of ``names``, one after the other, each in a new process (``extra``:
    the mode, kind and rate options, passed on)."""
    out: dict[str, Any] = {"changes": changes, "seconds": seconds, "loadavg_start": loadavg()}
    for name in names:
        print(f"spark_deploy: {name}", file=sys.stderr, flush=True)
        argv = [sys.executable, "-m", "bench.spark_deploy", "--one", name,
                "--changes", str(changes), "--seconds", str(seconds), *extra]  # fmt: skip
        done = subprocess.run(argv, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            out[name] = {"error": (done.stderr.strip().splitlines() or ["failed"])[-1]}
            continue
        out[name] = json.loads(done.stdout)
    return out


def table(results: dict[str, Any]) -> str:
    """The results as a Markdown table."""
    lines = [
        "| deployment | session ready | first batches | throughput (events/s) | "
        "lag p50 / p99 / max | leaf = root |",
        "|---|---|---|---|---|---|",
    ]
    for name in (n for n in DEPLOYMENTS if n in results):
        r = results[name]
        if "error" in r or not r:
            lines.append(f"| {name} | failed: {r.get('error', 'not run')} | | | | |")
            continue
        lg = next(iter(r["lag"].values()))
        lines.append(
            f"| {name} ({r.get('mode', 'micro-batch')}, {r.get('rate', 2000):,}/s) | "
            f"{r['session_s']:.1f} s | {r['first_batches_s']:.1f} s | "
            f"{r['throughput']['events_per_s']:,.0f} | "
            f"{lg['p50'] * 1000:.0f} / {lg['p99'] * 1000:.0f} / {lg['max'] * 1000:.0f} ms | "
            f"{'yes' if r['leaf_equals_root'] else 'NO'} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.spark_deploy", description=__doc__)
    parser.add_argument("--changes", type=int, default=50_000)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--mode", choices=("micro-batch", "low-latency"), default="micro-batch")
    parser.add_argument("--kind", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--rate", type=int, default=2000, help="changes/s of the lag run")
    parser.add_argument("--only", choices=DEPLOYMENTS, action="append", help="(repeatable)")
    parser.add_argument("--one", choices=DEPLOYMENTS, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        one = measure(
            args.one, args.changes, args.seconds, mode=args.mode, kind=args.kind, rate=args.rate
        )
        print(json.dumps(one))
        return
    extra = ("--mode", args.mode, "--kind", args.kind, "--rate", str(args.rate))
    results = run_all(args.changes, args.seconds, tuple(args.only or DEPLOYMENTS), extra)
    print(json.dumps(results, indent=2))
    print(table(results), file=sys.stderr)


if __name__ == "__main__":
    main()
