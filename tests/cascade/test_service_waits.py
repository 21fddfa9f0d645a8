"""A node service outlives a node database it cannot use for a while: it says what it waits
for and carries on when the database is back; it never exits on a transient failure (issue 10
D: ``baton cascade run`` exited for good, with the exit status the docs keep for bad input,
after a database stayed locked for 30 s). No Spark here: the root's service is the ticker."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg
import pytest

from baton.cascade import node_ops
from baton.cascade.db import open_node_db
from baton.errors import NodeUnreachable
from baton.local.processes import Proc
from baton.local.waiting import wait_for
from baton.testing.servers import PostgresServer
from baton.testing.workload import create_accounts

BATON = str(Path(sys.executable).with_name("baton"))


def test_locked_sqlite_node_is_unavailable_not_bad_input(tmp_path: Path) -> None:
    path = tmp_path / "s1.db"
    create_accounts(path)
    location = f"sqlite://{path}"
    node_ops.create_root("s1", location, "S")
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # another writer, holding the lock
    try:
        with open_node_db(location) as db:
            db.conn.execute("PRAGMA busy_timeout = 50")  # type: ignore[attr-defined]
            with pytest.raises(NodeUnreachable, match="database is locked"), db.transaction():
                pass
            assert db.state().name == "s1"  # reads go on meanwhile (WAL)
    finally:
        holder.execute("ROLLBACK")
        holder.close()


def test_root_service_waits_for_its_database(tmp_path: Path) -> None:
    with PostgresServer(tmp_path / "pg") as pg:
        with psycopg.connect(pg.url, autocommit=True) as admin:
            admin.execute("CREATE DATABASE s1")
        location = f"postgresql://postgres@127.0.0.1:{pg.port}/s1"
        create_accounts(location)
        node_ops.create_root("s1", location, "S")
        node_ops.add_table(location, "accounts")
        argv = [BATON, "cascade", "run", location, "--store", f"sqlite://{tmp_path}/store.db",
                "--ttl", "2"]  # fmt: skip
        proc = Proc("s1", argv, tmp_path / "s1.log")

        def last_tick() -> int:
            with open_node_db(location) as db:
                tick = db.last_tick()
                return tick.tick_id if tick else 0

        def write(i: int) -> None:
            with psycopg.connect(location, autocommit=True) as conn:
                conn.execute("INSERT INTO accounts VALUES (%s, 1, 'x', 0.5)", (i,))

        def status(*args: str) -> subprocess.CompletedProcess[str]:
            argv = [BATON, "cascade", "status", *args, "--via", location]
            return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=True)

        def service() -> dict[str, Any]:
            """s1's service as ``cascade status --json`` shows it (issue 28, point 2)."""
            res = status("--json")
            found: dict[str, Any] = json.loads(res.stdout)["members"][0]["service"]
            return found

        try:
            write(1)
            wait_for(lambda: last_tick() > 1, timeout=30, what="the root's ticker")
            beat = wait_for(lambda: (b := service())["phase"] == "ticking" and b, timeout=30)
            assert beat["state"] == "running" and beat["holder"].endswith(f":{proc.popen.pid}")
            pg.stop("immediate")
            wait_for(
                lambda: any("cascade node service waits" in x for x in proc.lines()),
                timeout=30,
                what="the service to say what it waits for",
            )
            assert proc.popen.poll() is None, proc.out.read_text()
            pg.start()
            before = last_tick()
            write(2)
            wait_for(lambda: last_tick() > before, timeout=30, what="a tick after the restart")
            wait_for(
                lambda: any("cascade node service resumed" in x for x in proc.lines()),
                timeout=10,
                what="the service to say it resumed",
            )
            assert proc.popen.poll() is None
            assert not any("Traceback" in x for x in proc.lines()), proc.out.read_text()
            # A clean SIGTERM is the normal end: no warning (it said reason=CancelledError).
            proc.popen.terminate()
            assert proc.popen.wait(30) == 0, proc.out.read_text()
            ended = [x for x in proc.lines() if "cascade node service stopped" in x]
            assert ended and all("level=info" in x for x in ended), ended
            assert not any("CancelledError" in x for x in proc.lines()), proc.out.read_text()
            # Stopped: status says so at once (it showed the root ok with lag 0 before).
            assert service()["state"] == "stopped"
            shown = status("-o", "wide")  # the service column says when it was last seen
            assert "not running: s1" in shown.stdout and "last seen" in shown.stdout, shown.stdout
        finally:
            proc.stop()
