"""The pipeline's lag while ``compare`` runs (issue 31): a writer at the root at a steady rate,
its lag to the branch measured as :mod:`bench.cascade` measures it, once with nothing else
running and once while ``compare`` of the leaf runs over and over.

The set is :class:`bench.cascade.BatonSet` on PostgreSQL (root -> branch -> leaf, each node's
service in a thread, low-latency workers on this process's Spark), ``accounts`` filled with
``--rows`` changes first. ``compare`` pauses the node it compares (the leaf) at a tick for as
long as it reads, so the leaf's own lag is the compare's length by design; what matters is what
the rest of the pipeline pays while Spark reads the branch's and the leaf's tables. compare
runs as a user runs it, ``baton cascade compare leaf accounts`` in a process of its own (its
own Spark, ``local[2]``), again and again while the writer runs: first on equal tables (the
database's first pass finds nothing: no Spark job), then with 300 differences planted at the
leaf (the suspect key ranges are read and compared on Spark). ``--nice N`` adds a run with
compare under ``nice -n N``.

    .venv/bin/python -m bench.compare_lag [--rows 200000] [--rate 2000] [--seconds 30] [--nice 19]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from baton import logs
from baton.cascade.db import open_node_db
from baton.service.worker import LOW_LATENCY
from bench import accounts_load
from bench.cascade import _warm, baton_set
from bench.common import loadavg, temp_dir


def _plant(leaf: str) -> None:
    """100 missing, 100 extra and 100 different rows at the leaf, spread over its keys (the
    extra ones far above any key the writer makes)."""
    with open_node_db(leaf) as db, db.transaction() as cur:
        ids = [r[0] for r in cur.execute("SELECT id FROM accounts ORDER BY id").fetchall()]
        step = len(ids) // 300
        for i in range(100):
            cur.execute("DELETE FROM accounts WHERE id = %s", (ids[3 * i * step],))
            cur.execute(
                "UPDATE accounts SET balance = balance + 1 WHERE id = %s", (ids[3 * i * step + 1],)
            )
            cur.execute(
                "INSERT INTO accounts (id, balance, name, updated_at) VALUES (%s, 0, 'x', 0)",
                (10**12 + i,),
            )


def _steady(
    s: Any, rate: int, seconds: float, seed: int, before: Callable[[], None] | None = None
) -> dict[str, Any]:
    """The writer's lag to the branch over ``seconds`` at ``rate``, once the leaf equals the
    root (then ``before`` runs)."""
    accounts_load.wait_equal(s.target("root"), s.target("leaf"), 300)
    if before is not None:
        before()
    result = dict(accounts_load.steady(s.target("root"), s.target("branch"), rate, seconds, seed))
    result.pop("series", None)
    result["loadavg"] = loadavg()
    s.check()
    return result


def _comparing(s: Any, nice: int | None, halt: threading.Event) -> dict[str, Any]:
    """``baton cascade compare leaf accounts`` again and again until ``halt``: their times and
    exit codes."""
    argv = [str(Path(sys.executable).with_name("baton")), "cascade", "compare", "leaf",
            "accounts", "--via", s.target("root"), "--json"]  # fmt: skip
    if nice is not None:
        argv = ["nice", "-n", str(nice), *argv]
    env = {**os.environ, "BATON_SPARK_MASTER": "local[2]"}
    runs: list[float] = []
    codes: list[int] = []
    while not halt.is_set():
        started = time.monotonic()
        res = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
        runs.append(round(time.monotonic() - started, 2))
        codes.append(res.returncode)
        if res.returncode not in (0, 1):  # 1: differences found
            print(f"  compare exited {res.returncode}: {res.stderr.strip()[-300:]}", flush=True)
    return {"nice": nice, "compares": len(runs), "compare_s": runs, "exit_codes": codes}


def run(rows: int, rate: int, seconds: float, nices: list[int]) -> dict[str, Any]:
    from baton.spark.session import build_session

    out: dict[str, Any] = {"rows": rows, "rate": rate, "seconds": seconds}
    with temp_dir("compare-lag") as directory:
        spark = build_session(master="local[2]", work_dir=directory / "spark", quiet=True)
        try:
            with baton_set("postgres", directory / "set", spark, LOW_LATENCY) as s:
                _warm(s)
                accounts_load.generate(s.target("root"), rows, seed=1)
                out["without"] = _steady(s, rate, seconds, seed=2)
                runs: list[tuple[str, int | None]] = [("during_compare", None)]
                runs += [(f"during_compare_nice_{n}", n) for n in nices if n is not None]
                runs.append(("during_compare_with_differences", None))
                for i, (key, nice) in enumerate(runs):
                    planting = key == "during_compare_with_differences"
                    halt = threading.Event()
                    got: dict[str, Any] = {}
                    thread = threading.Thread(
                        target=lambda n=nice, h=halt, g=got: g.update(_comparing(s, n, h)),
                        daemon=True,
                        name="compare",
                    )

                    def begin(planting: bool = planting, thread: threading.Thread = thread) -> None:
                        if planting:
                            _plant(s.target("leaf"))
                        thread.start()

                    try:
                        lag = _steady(s, rate, seconds, seed=3 + i, before=begin)
                    finally:
                        halt.set()
                        if thread.is_alive():
                            thread.join(600)
                    out[key] = {**lag, **got}
                    for q in ("p50", "p99"):
                        lag[f"{q}_ratio"] = round(lag[q] / out["without"][q], 2)
                        out[key][f"{q}_ratio"] = lag[f"{q}_ratio"]
        finally:
            spark.stop()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.compare_lag", description=__doc__)
    ap.add_argument("--rows", type=int, default=200_000, help="changes written before")
    ap.add_argument("--rate", type=int, default=2000, help="changes/s of the steady writer")
    ap.add_argument("--seconds", type=float, default=30.0, help="of each steady run")
    ap.add_argument("--nice", type=int, help="also a run with compare under nice -n NICE")
    args = ap.parse_args()
    logs.setup(logging.WARNING)  # the node services' warnings, with their fields
    nices = [] if args.nice is None else [args.nice]
    print(json.dumps(run(args.rows, args.rate, args.seconds, nices), indent=2))


if __name__ == "__main__":
    main()
