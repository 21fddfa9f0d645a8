"""The partitions part of ``baton demo`` (seed 004's complex case, small): two partition sets P
and Q, each a SQLite root with a writer, merged into the cascade the demo built before: its
current root becomes their combined root, with one merge-leaf per partition in its database.
Rows written at P and Q reach the cascade's leaf, two hops away, through the combined set."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console

from baton.cascade import commands
from baton.cascade.db import open_node_db
from baton.errors import WaitTimeout
from baton.local.waiting import wait_for
from baton.service.node import NodeService
from baton.service.worker import MICRO_BATCH
from baton.testing.workload import create_accounts, run_workload

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

Step = Callable[[str, float, str, bool], None]
#: Partition P writes ids from here, Q from twice this: apart from each other and the demo's.
BASE = 10**12


def _serve(services: list[NodeService], halt: threading.Event) -> None:
    """Step every service (partition roots tick, merge-leaves apply) until ``halt``."""
    while not halt.wait(0.05):
        for service in services:
            try:
                service.step()
            except Exception:  # what a node service waits out, as `baton cascade run` does
                continue


def _rows(location: str, low: int) -> set[tuple[object, ...]]:
    with open_node_db(location) as db:
        return {tuple(r) for r in db.read_rows("accounts") if int(r[0]) >= low}


def partitions_part(
    console: Console, workdir: Path, spark: SparkSession, *, host: str, leaf: str, step: Step
) -> bool:
    """Merge two partition sets into the cascade whose root is at ``host``; True when ``leaf``
    (a node of that cascade) ends with exactly the partitions' rows."""
    console.rule("[bold]combining partitions: two partition sets merged into the cascade")
    loc = {n: f"sqlite://{workdir / n}.db" for n in ("p1", "q1")}
    t0 = time.monotonic()
    for i, (name, set_name) in enumerate((("p1", "P"), ("q1", "Q")), start=1):
        create_accounts(workdir / f"{name}.db")
        run_workload(workdir / f"{name}.db", 5, seed=i, id_base=i * BASE)  # rows before
        commands.create_root(name, loc[name], set_name)
        commands.add_table(loc[name], "accounts", node=name)
        merge_leaf = f"{set_name.lower()}2"
        commands.create_node("merge-leaf", merge_leaf, host, provider=name, via=loc[name])
        commands.add_table(loc[name], "accounts", node=merge_leaf)
    step("partition sets P and Q, merge-leaves at the combined root", time.monotonic() - t0,
         f"{host.rsplit('/', 1)[-1]} now hosts p2 and q2", True)  # fmt: skip
    services = [NodeService(loc[n], 1, lambda: spark) for n in ("p1", "q1")]
    services += [NodeService(f"{host}#{p}", 1, lambda: spark, mode=MICRO_BATCH) for p in ("P", "Q")]
    halt = threading.Event()
    thread = threading.Thread(target=_serve, args=(services, halt), daemon=True)
    thread.start()
    try:
        t0 = time.monotonic()
        for i, name in enumerate(("p1", "q1"), start=1):
            run_workload(workdir / f"{name}.db", 20, seed=10 + i, id_base=i * BASE)

        def merged() -> bool:
            want = _rows(loc["p1"], BASE) | _rows(loc["q1"], BASE)
            return _rows(leaf, BASE) == want

        try:
            wait_for(merged, timeout=180, interval=0.2, what="the partitions' rows at the leaf")
            ok = True
        except WaitTimeout:  # reported as a failed step
            ok = False
        rows = len(_rows(leaf, BASE))
        step("P + Q rows at the cascade's leaf", time.monotonic() - t0,
             f"{rows} rows: initial copies without emptying the table, then every change; "
             "two hops (merge-leaf, leaf)", ok)  # fmt: skip
        return ok
    finally:
        halt.set()
        thread.join(30)
        for service in services:
            service.stop()
