"""The cascade over Spark Connect (a server started for the module, Spark on local[2] inside
it): ``baton cascade run --spark-remote sc://...`` serves the branch and the leaf as a Connect
client, so their streaming queries run on the server. The client is SIGKILLed mid-stream: its
queries go on applying on the server (a client's death does not stop them), until the next
client, which reattaches to the same server session by name, stops them before starting its
own. Every node ends with the root's rows, every event copied exactly once.

The same crash plan under node agents: the controller places the cascade's workers, the agent
leading the branch's group is SIGKILLed, and the agent taking the group over reattaches to the
group's server session and stops the orphan. (This replaced the local-Spark version of the
move: the agents and the controller are the same code, and over Connect the orphan is the case
a local JVM dying with its agent never shows.)"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from baton.cascade import commands
from baton.cascade.db import open_node_db
from baton.local.cluster import LocalCluster
from baton.local.waiting import wait_for
from baton.placement.records import create_object, make_object
from baton.service.worker import query_owner
from baton.store import open_store
from baton.testing.cascade import root_and_branch, root_ticked
from baton.testing.spark_servers import ConnectServer
from baton.testing.workload import Writer
from tests.spark_deploy.planted import compare_then_repair, planted
from tests.spark_deploy.procs import Cascade

#: Lists the worker queries of the named server session, from another client (which must not
#: stop the session: that would close it).
ACTIVE = """
import json, sys
from baton.spark.session import build_session
s = build_session(remote=sys.argv[1], connect_session=sys.argv[2])
print(json.dumps(sorted(q.name for q in s.streams.active)))
"""


def active_queries(remote: str, session: str) -> list[str]:
    out = subprocess.run(
        [sys.executable, "-c", ACTIVE, remote, session],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    names: list[str] = json.loads(out.splitlines()[-1])
    return names


def stopped_lines(lines: list[str]) -> list[str]:
    return [line for line in lines if "stopping the query of an older worker" in line]


@pytest.mark.long
def test_killed_connect_client_is_replaced(connect_server: ConnectServer, cascade: Cascade) -> None:
    subs_locations = [cascade.loc["s2"], cascade.loc["s3"]]
    session = "baton-cascade-run:" + ",".join(sorted(subs_locations))
    remote = ["--spark-remote", connect_server.url, "--mode", "micro-batch"]
    cascade.run("root", [cascade.loc["s1"]])
    first = cascade.run("subs", subs_locations, *remote)
    cascade.start_writing()
    wait_for(lambda: cascade.position("s3") > 2, timeout=150, what="the leaf's first batches")

    def both_running() -> list[str] | None:
        names = active_queries(connect_server.url, session)
        nodes = sorted((o[0], o[1]) for o in map(query_owner, names) if o)
        return names if nodes == [("S", "s2"), ("S", "s3")] else None

    old = wait_for(both_running, timeout=60, interval=0.5, what="both workers' queries")
    owners = [query_owner(name) for name in old]

    # The client dies; its queries do not: the leaf goes on being applied by them.
    first.signal(signal.SIGKILL)
    first.popen.wait(30)
    after_kill = cascade.position("s3")
    wait_for(lambda: cascade.position("s3") > after_kill, timeout=30, what="the orphans to apply")

    # The next client stops the orphans (older epochs) before it starts its own queries.
    second = cascade.run("subs", subs_locations, *remote)
    wait_for(lambda: len(stopped_lines(second.lines())) == 2, timeout=90, what="orphans stopped")
    stopped = " ".join(stopped_lines(second.lines()))
    assert all(name in stopped for name in old), stopped

    def replaced() -> list[str] | None:
        names = active_queries(connect_server.url, session)
        return names if len(names) == 2 and not set(names) & set(old) else None

    new = wait_for(replaced, timeout=60, interval=0.5, what="the new client's queries")
    by_node = {o[1]: o[2] for o in map(query_owner, new) if o}
    assert all(by_node[n] > e for _, n, e in filter(None, owners)), (old, new)

    cascade.stop_writing()
    upto = cascade.wait_synced()
    cascade.check_equal(upto)
    assert sum(cascade.written) > 200
    # Over Connect, quiet sessions say in one line which settings are the server's; Spark's
    # CANNOT_MODIFY_CONFIG warnings and tracebacks never reach the terminal.
    out = "\n".join(first.lines() + second.lines())
    assert "left to the server" in out
    assert "CANNOT_MODIFY_CONFIG" not in out and "Traceback" not in out


async def _objects(url: str, loc: dict[str, str]) -> None:
    async with open_store(url) as store:
        for name, location in loc.items():
            spec = {"location": location, "mode": "micro-batch"}  # its orphan is a query
            obj = make_object("cascade-worker", name, 1, 2, spec=spec)
            await create_object(store, obj)


def _group(c: LocalCluster, name: str) -> dict[str, Any] | None:
    view = c.get("/v1/placement")
    if view is None:
        return None
    return next((g for g in view["groups"] if g["group"] == f"{name}/0"), None)


@pytest.mark.long
def test_placed_worker_moves_and_its_orphan_is_stopped(
    connect_server: ConnectServer, tmp_path: Path
) -> None:
    """Node agents with ``BATON_SPARK_REMOTE``: the cascade-worker objects are placed by the
    controller, and the agent leading the branch's group is SIGKILLed mid-stream. Its query goes
    on running on the server; the agent that takes the group over attaches to the group's
    server session (``baton-object:GROUP``), stops the orphan (an older epoch) and resumes from
    the position in the branch's database: every event arrives exactly once."""
    loc = root_and_branch(tmp_path)

    def position() -> int:
        with open_node_db(loc["s2"], readonly=True) as db:
            return db.state().position

    env = {"BATON_SPARK_REMOTE": connect_server.url}
    with LocalCluster(3, None, tmp_path / "cluster", ttl=2, reconcile_interval=0.3, env=env) as c:
        c.wait_for(lambda: list(c.states().values()) == ["live"] * 3, timeout=30)
        asyncio.run(_objects(c.store_url, loc))
        group = c.wait_for(lambda: (g := _group(c, "s2")) and g["state"] == "ok" and g, 60)
        session = f"baton-object:{group['group']}"
        wait_for(lambda: position() > 1, timeout=120, what="the branch worker to apply")
        old = active_queries(connect_server.url, session)
        assert [o[1:] for o in map(query_owner, old) if o] == [("s2", group["term"])], old
        with Writer(tmp_path / "s1.db", transactions=10):
            # The agent dies; its query on the server does not (and goes on applying).
            leader = group["leader"]
            c.kill(leader)
            moved = c.wait_for(
                lambda: (g := _group(c, "s2")) and g["leader"] not in (None, leader) and g, 60
            )
            assert moved["term"] > group["term"]
            agent = c.node(moved["leader"]).proc
            assert agent is not None
            wait_for(
                lambda: stopped_lines(agent.lines()),
                timeout=90,
                what="the new leader to stop the orphan",
            )

            def replaced() -> list[str] | None:
                names = active_queries(connect_server.url, session)
                owners = [o[1:] for o in map(query_owner, names) if o]
                return names if owners == [("s2", moved["term"])] else None

            wait_for(replaced, timeout=60, interval=0.5, what="only the new epoch's query")
            before = position()
            wait_for(lambda: position() > before, timeout=120, what="the moved worker to apply")
        last = root_ticked(loc["s1"])
        wait_for(lambda: position() >= last, timeout=120, what="s2 to catch up")
        with open_node_db(loc["s1"]) as root, open_node_db(loc["s2"]) as branch:
            assert branch.read_rows("accounts") == root.read_rows("accounts")
            assert branch.state().epoch == moved["term"]  # the new worker's epoch applied
            ids = [e.ev_id for e in branch.batch_events(1, last)]
            assert ids == [e.ev_id for e in root.batch_events(1, last)]
            assert len(ids) == len(set(ids)) > 100  # every event copied once, none lost


def test_compare_and_repair_over_connect(connect_server: ConnectServer, tmp_path: Path) -> None:
    """compare and repair through the command line, Spark on the Connect server."""
    compare_then_repair(planted(tmp_path), {"BATON_SPARK_REMOTE": connect_server.url})


def _ledger(cascade: Cascade) -> None:
    """A second table, ``ledger``, in the three databases; the root has rows in it and captures
    it, and the branch copies it (added at the leaf later)."""
    import sqlite3

    for n in ("s1", "s2", "s3"):
        with sqlite3.connect(cascade.dir / f"{n}.db") as conn:
            conn.execute("CREATE TABLE ledger (id INTEGER PRIMARY KEY, note TEXT)")
    with sqlite3.connect(cascade.dir / "s1.db") as conn:
        conn.executemany("INSERT INTO ledger VALUES (?, ?)", [(i, f"n{i}") for i in range(50)])
    commands.add_table(cascade.loc["s1"], "ledger", "s1")
    commands.add_table(cascade.loc["s1"], "ledger", "s2")


def _table_state(cascade: Cascade, node: str, table: str) -> str | None:
    with open_node_db(cascade.loc[node]) as db:
        return db.tables().get(table)


@pytest.mark.long
def test_low_latency_workers_over_connect(connect_server: ConnectServer, cascade: Cascade) -> None:
    """``--mode low-latency`` over Spark Connect: each worker's long-running task is a one-row
    DataFrame's mapInArrow on the server. The client is SIGKILLed: its tasks go on running on
    the server, holding both of its task slots, until the next client's workers claim newer
    epochs, and then end by themselves (fenced). The next client's first Spark job is a table
    copy at the leaf: it runs only because the leaf's worker claims its epoch before it (the
    orphan then frees its slot); a claim made only when the task starts, after the copy, left
    the copy waiting forever (a CI run). Every event is copied exactly once."""
    subs = [cascade.loc["s2"], cascade.loc["s3"]]
    remote = ["--spark-remote", connect_server.url, "--mode", "low-latency"]
    _ledger(cascade)
    cascade.run("root", [cascade.loc["s1"]])
    first = cascade.run("subs", subs, *remote)
    cascade.start_writing()
    wait_for(lambda: cascade.position("s3") > 2, timeout=150, what="the leaf's first batches")
    wait_for(lambda: _table_state(cascade, "s2", "ledger") == "ok", 120, what="the branch's copy")

    def epochs() -> dict[str, int]:
        out = {}
        for n in ("s2", "s3"):
            with open_node_db(cascade.loc[n]) as db:
                out[n] = db.state().epoch
        return out

    before = epochs()
    first.signal(signal.SIGKILL)
    first.popen.wait(30)
    # The leaf's next worker must copy ``ledger`` (a Spark job) before it starts its task,
    # while the two orphans hold both of the server's slots.
    commands.add_table(cascade.loc["s1"], "ledger", "s3")
    leaf = cascade.run("leaf", [cascade.loc["s3"]], *remote)
    wait_for(lambda: _table_state(cascade, "s3", "ledger") == "ok", 120, what="the leaf's copy")
    branch = cascade.run("branch", [cascade.loc["s2"]], *remote)
    wait_for(
        lambda: all(e > before[n] for n, e in epochs().items()), timeout=120, what="new epochs"
    )
    # From here an orphan applies nothing (fenced): the leaf moves only by the new tasks.
    claimed = cascade.position("s3")
    wait_for(lambda: cascade.position("s3") > claimed + 3, timeout=120, what="the new tasks")
    cascade.stop_writing()
    upto = cascade.wait_synced()
    cascade.check_equal(upto)
    with open_node_db(cascade.loc["s1"]) as root, open_node_db(cascade.loc["s3"]) as leaf_db:
        assert leaf_db.read_rows("ledger") == root.read_rows("ledger")
    # Every client ran its workers as tasks on the server, and said nothing but that.
    for proc, workers in ((first, 2), (leaf, 1), (branch, 1)):
        said = "\n".join(proc.lines())
        assert said.count("mode=low-latency") >= workers and "Traceback" not in said
        assert "level=error" not in said
