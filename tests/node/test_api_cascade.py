"""The cascade routes of the node API (``/v1/cascade``) against a real agent, in process, on real
SQLite node databases: building a set, tables, events, providers, tags, pause, status, check,
failover, resurrect and switchover (no Spark: a table copy is what the worker does, and the
worker's apply is done by hand with :func:`apply_batch`); bad input is 400 (or 422 from
validation), a state that refuses is 409, and neither changes anything nor shows a password.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from baton.cascade import node_ops
from baton.cascade.apply import apply_batch
from baton.cascade.batches import reduce_events
from baton.cascade.db import open_node_db
from baton.node.agent import NodeAgent
from baton.node.api import build_app
from baton.testing import await_for, free_port
from baton.testing.cascade import served
from tests.node.test_api import TOKEN, client, config
from tests.test_cli_cascade import NAMES, Set, sql

PREFIX = "/v1/cascade"
SECRET = "s3cr3t-pw"


@pytest.fixture
async def agent(tmp_path: Path) -> AsyncIterator[NodeAgent]:
    (tmp_path / "agent").mkdir()
    a = NodeAgent(config(tmp_path / "agent", "a"))
    await a.start()
    await a.controller.wait_leadership(10)
    yield a
    await a.stop()


@pytest.fixture
def cset(tmp_path: Path) -> Set:
    """SQLite databases s1..s4 with ``accounts`` (and ``nopk``), not yet nodes."""
    (tmp_path / "set").mkdir()
    return Set(tmp_path / "set")


async def call(c: httpx.AsyncClient, method: str, op: str, body: dict[str, Any]) -> Any:
    """A cascade route that must succeed: its JSON."""
    if method == "GET":
        res = await c.get(f"{PREFIX}/{op}", params=body)
    else:
        res = await c.post(f"{PREFIX}/{op}", json=body)
    assert res.status_code == 200, (op, res.status_code, res.text)
    return res.json()


async def build(c: httpx.AsyncClient, s: Set) -> None:
    """s1 root -> s2 branch -> s3 branch -> s4 leaf, replicating ``accounts`` (copied as the
    workers would)."""
    via = s.loc("s1")
    await call(c, "POST", "create-root", {"name": "s1", "location": via, "set": "S"})
    for kind, name, provider in (("branch", "s2", "s1"), ("branch", "s3", "s2"),
                                 ("leaf", "s4", "s3")):  # fmt: skip
        body = {"name": name, "location": s.loc(name), "provider": provider, "via": via}
        await call(c, "POST", f"create-{kind}", body)
    await call(c, "POST", "add-table", {"table": "accounts", "all": True, "via": via})
    for name in NAMES[1:]:
        node_ops.copy_table(s.loc(name), "accounts")  # what each node's worker does, with Spark


def catch_up(location: str) -> int:
    """What a node's worker does, without Spark: apply everything its provider has ticked."""
    with open_node_db(location) as db:
        st = db.state()
        assert st.provider is not None
        with open_node_db(db.nodes()[st.provider][0]) as prov:
            last = prov.last_tick()
            assert last is not None
            ticks = prov.ticks(st.position, last.tick_id)
            events = list(prov.batch_events(st.position, last.tick_id))
        apply_batch(db, ticks, reduce_events(events), events, epoch=1, provider=st.provider)
        return db.state().position


# -- building and operating a set ----------------------------------------------------------------


async def test_build_and_operate_a_set(agent: NodeAgent, cset: Set) -> None:
    s = cset
    via = s.loc("s1")
    async with client(agent) as c:
        created = await call(c, "POST", "create-root", {"name": "s1", "location": via, "set": "S"})
        assert created == {"name": "s1", "role": "root", "provider": None, "set_name": "S",
                           "location": via, "position": 0, "already": False}  # fmt: skip
        for kind, name, provider in (("branch", "s2", "s1"), ("branch", "s3", "s2"),
                                     ("leaf", "s4", "s3")):  # fmt: skip
            body = {"name": name, "location": s.loc(name), "provider": provider, "via": via}
            r = await call(c, "POST", f"create-{kind}", body)
            assert (r["role"], r["provider"], r["position"], r["already"]) == (
                kind, provider, 1, False
            )  # fmt: skip
        # Every creation again: done already, and nothing changes.
        before = s.snapshot()
        again = await call(c, "POST", "create-root", {"name": "s1", "location": via, "set": "S"})
        assert again["already"] is True
        body = {"name": "s4", "location": s.loc("s4"), "provider": "s3", "via": s.loc("s2")}
        assert (await call(c, "POST", "create-leaf", body))["already"] is True
        assert s.snapshot() == before

        # Tables: the root captures, the others are registered for their worker's copy.
        added = await call(c, "POST", "add-table", {"table": "accounts", "all": True, "via": via})
        assert added == {
            "table": "accounts",
            "nodes": [{"node": "s1", "table": "accounts", "state": "ok"}]
            + [{"node": n, "table": "accounts", "state": "copying"} for n in NAMES[1:]],
            "skipped": [],
        }
        assert await call(c, "POST", "add-table", {"table": "accounts", "all": True,
                                                   "via": via}) == added  # fmt: skip
        q = {"node": "s4", "via": via}
        assert await call(c, "GET", "tables", q) == {"accounts": "copying"}
        for name in NAMES[1:]:
            node_ops.copy_table(s.loc(name), "accounts")  # what each node's worker does, with Spark
        assert await call(c, "GET", "tables", q) == {"accounts": "ok"}
        assert await call(c, "GET", "missing", q) == {"node": "s4", "provider": "s3",
                                                      "tables": []}  # fmt: skip
        assert (await call(c, "GET", "missing", {**q, "node": "s1"}))["provider"] is None
        assert (await call(c, "GET", "check", q))["equal"] is True

        # Events go to the root, whichever member the set is reached through.
        emitted = await call(c, "POST", "emit", {"type": "app.note", "data": {"n": [1, "x"]},
                                                 "via": s.loc("s4")})  # fmt: skip
        assert emitted["root"] == "s1" and emitted["type"] == "app.note"
        with open_node_db(via) as db:
            (event,) = db.events_after(1)
        assert (event.ev_id, json.loads(event.data or "")) == (emitted["ev_id"], {"n": [1, "x"]})

        # Pause and resume.
        assert await call(c, "POST", "pause", {"node": "s3", "via": via}) == {
            "node": "s3", "paused": True
        }  # fmt: skip
        members = {m["name"]: m for m in await call(c, "GET", "members", {"via": via})}
        assert members["s3"]["paused"] is True
        await call(c, "POST", "resume", {"node": "s3", "via": via})
        with open_node_db(s.loc("s3")) as db:
            assert db.state().paused is False

        # Dead and alive, in every node list; a dead node is no candidate.
        assert await call(c, "GET", "candidates", q) == ["s1", "s2", "s3"]
        tagged = await call(c, "POST", "tag-dead", {"node": "s2", "via": via})
        assert tagged == {"node": "s2", "dead": True, "not_reached": []}
        for name in ("s1", "s3", "s4"):
            with open_node_db(s.loc(name)) as db:
                assert db.nodes()["s2"][1] is True, name
        assert await call(c, "GET", "candidates", q) == ["s1", "s3"]
        await call(c, "POST", "tag-alive", {"node": "s2", "via": via})
        assert await call(c, "GET", "candidates", q) == ["s1", "s2", "s3"]

        # A cycle is refused (409) and changes nothing; a good change, then again (a no-op).
        before = s.snapshot()
        res = await c.post(f"{PREFIX}/change-provider",
                           json={"node": "s2", "provider": "s3", "via": via})  # fmt: skip
        assert res.status_code == 409 and "cycle" in res.json()["detail"]
        assert s.snapshot() == before
        body = {"node": "s3", "provider": "s1", "via": via}
        assert await call(c, "POST", "change-provider", body) == {
            "node": "s3", "provider": "s1", "previous": "s2", "changed": True
        }  # fmt: skip
        assert (await call(c, "POST", "change-provider", body))["changed"] is False
        with open_node_db(via) as db:
            assert "s3" in db.watermarks()

        # Status: the set, its root and watermark, and each member with its lag.
        status = await call(c, "GET", "status", {"via": s.loc("s2")})
        assert set(status) == {"set", "root", "global_watermark", "auto_failover", "sync",
                              "members"}  # fmt: skip
        assert (status["set"], status["root"], status["global_watermark"]) == ("S", "s1", 0)
        assert status["members"] == await call(c, "GET", "members", {"via": via})
        for m in status["members"]:
            assert set(m) == {"name", "location", "role", "provider", "position", "lag_ticks",
                              "lag_seconds", "paused", "dead", "reachable", "tables",
                              "tick_time", "switching_to", "switch_tick",
                              "service", "paused_by"}  # fmt: skip
            assert m["switching_to"] is None and m["switch_tick"] is None
            assert m["service"] == {"state": "never"}  # no service ever ran here
            assert (m["lag_ticks"], m["lag_seconds"]) == (0, 0.0), m
        assert {m["name"]: (m["role"], m["provider"]) for m in status["members"]} == {
            "s1": ("root", None), "s2": ("branch", "s1"), "s3": ("branch", "s1"),
            "s4": ("leaf", "s3"),
        }  # fmt: skip
        # A new tick the others have not applied: one tick of lag, in seconds too.
        with open_node_db(via) as db, db.transaction() as cur:
            db.make_tick(cur)
        lagging = {m["name"]: m for m in await call(c, "GET", "members", {"via": via})}
        assert lagging["s4"]["lag_ticks"] == 1 and lagging["s4"]["lag_seconds"] >= 0
        assert lagging["s1"]["lag_ticks"] == 0

        # remove-table, then again: nothing to do.
        body = {"table": "accounts", "node": "s4", "via": via}
        assert (await call(c, "POST", "remove-table", body))["removed"] is True
        assert (await call(c, "POST", "remove-table", body))["removed"] is False
        assert await call(c, "GET", "missing", q) == {"node": "s4", "provider": "s3",
                                                      "tables": ["accounts"]}  # fmt: skip


async def test_failover_resurrect_and_switchover(agent: NodeAgent, cset: Set) -> None:
    s = cset
    via = s.loc("s2")
    async with client(agent) as c:
        await build(c, s)
        # The root takes an event that never reaches the set, then is lost.
        await call(c, "POST", "emit", {"type": "app.lost", "via": via})
        failed = await call(c, "POST", "failover", {"dead_root": "s1", "via": via})
        assert failed == {"dead_root": "s1", "new_root": "s2", "fork": 1, "notes": []}
        assert await call(c, "POST", "failover", {"dead_root": "s1", "via": via}) == failed
        status = await call(c, "GET", "status", {"via": via})
        members = {m["name"]: m for m in status["members"]}
        assert status["root"] == "s2" and members["s1"]["dead"] is True
        assert members["s2"]["role"] == "root"

        # It comes back: its lost event is saved on the node's host, and it is a branch.
        save = s.dir / "lost.jsonl"
        body = {"old_root": "s1", "save": str(save), "via": via}
        back = await call(c, "POST", "resurrect", body)
        assert back == {"node": "s1", "provider": "s2", "fork": 1, "saved": 1, "file": str(save)}
        (line,) = save.read_text().splitlines()
        assert json.loads(line)["type"] == "app.lost"
        assert (await call(c, "POST", "resurrect", body))["saved"] == 0  # again: nothing more
        assert save.read_text().splitlines() == [line]
        members = {m["name"]: m for m in await call(c, "GET", "members", {"via": via})}
        assert (members["s1"]["role"], members["s1"]["dead"]) == ("branch", False)

        # Switchover back to s1: refused without its worker (409, nothing changed) ...
        body = {"new_root": "s1", "timeout": "0.3", "via": via}
        res = await c.post(f"{PREFIX}/switchover", json=body)
        assert res.status_code == 409, res.text
        assert "s1's worker is not running" in res.json()["detail"]
        with served(s.loc("s1")):  # this test applies for it (catch_up)
            plan = await call(c, "POST", "switchover", {**body, "dry_run": True})
            assert (plan["dry_run"], plan["root"], plan["under_way"]) == (True, "s2", None)
            assert "s2 stops capturing accounts" in plan["steps"][0]
            # ... a worker that applies nothing: it does not finish (409, and says so) ...
            res = await c.post(f"{PREFIX}/switchover", json=body)
            assert res.status_code == 409, res.text
            assert "run the same switchover again" in res.json()["detail"]
            # ... and once the worker applied the switch tick, the same request finishes it.
            await await_for(lambda: catch_up(s.loc("s1")) > 1, timeout=10)
            done = await call(c, "POST", "switchover", {**body, "timeout": 10})
        assert (done["new_root"], done["old_root"], done["already"]) == ("s1", "s2", False)
        again = await call(c, "POST", "switchover", body)
        assert (again["tick"], again["already"]) == (done["tick"], True)
        roles = {m["name"]: (m["role"], m["provider"])
                 for m in await call(c, "GET", "members", {"via": via})}  # fmt: skip
        assert roles["s1"] == ("root", None) and roles["s2"] == ("branch", "s1")


# -- bad input -----------------------------------------------------------------------------------

PG = f"postgresql://u:{SECRET}@127.0.0.1:PORT/db"

#: (method, route, request, status, needle). VIA is s1's location, TMP the set's directory.
# fmt: off
BAD: list[tuple[str, str, dict[str, Any], int, str]] = [
    ("GET", "status", {"via": "sqlite://TMP/missing.db"}, 400, "no such node database"),
    ("GET", "status", {"via": "mysql://h/db"}, 400, "mysql"),
    ("GET", "status", {"via": "sqlite://TMP/plain.db"}, 400, "not a cascade node"),
    ("GET", "status", {"via": "VIA", "bogus": "1"}, 422, "bogus"),
    ("GET", "members", {"via": PG}, 503, "cannot connect"),
    ("GET", "tables", {"node": "zz", "via": "VIA"}, 400, "unknown node 'zz'"),
    ("GET", "tables", {"node": "bad name", "via": "VIA"}, 422, "node"),
    ("GET", "candidates", {"node": "s1", "via": "VIA"}, 409, "root"),
    ("GET", "check", {"node": "s4", "table": "nopk", "via": "VIA"}, 400, "does not replicate"),
    ("POST", "create-root", {"name": "x", "location": "mysql://h/db", "set": "T"}, 400, "mysql"),
    ("POST", "create-root", {"name": "x", "location": PG, "set": "T"}, 503, "cannot connect"),
    ("POST", "create-root", {"name": "x", "location": PG}, 422, "set"),
    ("POST", "create-root", {"name": "x", "location": "LOC_s2", "set": "T"}, 409, "already"),
    (
        "POST",
        "create-root",
        {"name": "bad name", "location": "sqlite://TMP/n.db", "set": "T"},
        422,
        "name",
    ),
    (
        "POST",
        "create-root",
        {"name": "x", "location": "sqlite:///no/such/dir/x.db", "set": "T"},
        400,
        "does not exist",
    ),
    (
        "POST",
        "create-branch",
        {"name": "s9", "location": "sqlite://TMP/n.db", "provider": "zz", "via": "VIA"},
        400,
        "unknown node",
    ),
    (
        "POST",
        "create-leaf",
        {"name": "s9", "location": "sqlite://TMP/n.db", "provider": "s4", "via": "VIA"},
        409,
        "s4 is a leaf",
    ),
    ("POST", "add-table", {"table": "nopk", "node": "s1", "via": "VIA"}, 400, "primary key"),
    ("POST", "add-table", {"table": "nopk", "all": True, "via": "VIA"}, 400, "primary key"),
    ("POST", "add-table", {"table": "nosuch", "all": True, "via": "VIA"}, 400, "nosuch"),
    ("POST", "add-table", {"table": "nosuch", "node": "s2", "via": "VIA"}, 400, "nosuch"),
    ("POST", "add-table", {"table": "only_root", "all": True, "via": "VIA"}, 400, "only_root"),
    ("POST", "add-table", {"table": "accounts", "via": "VIA"}, 400, "give either"),
    ("POST", "add-table", {"table": "accounts", "node": "zz", "via": "VIA"}, 400, "unknown node"),
    ("POST", "remove-table", {"table": "accounts", "node": "s1", "via": "VIA"}, 409, "still"),
    ("POST", "remove-table", {"table": "nosuch", "node": "s2", "via": "VIA"}, 400, "nosuch"),
    ("POST", "emit", {"type": "app.x", "data": [1], "via": "VIA"}, 422, "data"),
    ("POST", "emit", {"type": "app.x", "data": "{nope", "via": "VIA"}, 422, "data"),
    ("POST", "emit", {"type": "U", "via": "VIA"}, 400, "reserved"),
    ("POST", "emit", {"type": "baton.watermark", "via": "VIA"}, 400, "reserved"),
    ("POST", "change-provider", {"node": "s2", "provider": "s3", "via": "VIA"}, 409, "cycle"),
    ("POST", "change-provider", {"node": "s3", "provider": "s4", "via": "VIA"}, 409, "leaf"),
    ("POST", "change-provider", {"node": "s1", "provider": "s2", "via": "VIA"}, 409, "root"),
    ("POST", "change-provider", {"node": "s3", "provider": "s3", "via": "VIA"}, 400, "own"),
    ("POST", "change-provider", {"node": "s3", "provider": "zz", "via": "VIA"}, 400, "unknown"),
    ("POST", "tag-dead", {"node": "zz", "via": "VIA"}, 400, "unknown node"),
    ("POST", "tag-alive", {"node": "zz", "via": "VIA"}, 400, "unknown node"),
    ("POST", "pause", {"node": "zz", "via": "VIA"}, 400, "unknown node"),
    ("POST", "pause", {"node": "s2", "via": "VIA", "extra": PG}, 422, "extra"),
    ("POST", "resume", {"node": "zz", "via": "VIA"}, 400, "unknown node"),
    ("POST", "switchover", {"new_root": "zz", "via": "VIA"}, 400, "unknown node"),
    ("POST", "switchover", {"new_root": "s4", "via": "VIA"}, 409, "leaf"),
    ("POST", "switchover", {"new_root": "s2", "timeout": 0, "via": "VIA"}, 422, "timeout"),
    ("POST", "failover", {"dead_root": "zz", "via": "VIA"}, 400, "unknown node"),
    ("POST", "failover", {"dead_root": "s2", "via": "VIA"}, 409, "not the root"),
    ("POST", "resurrect", {"old_root": "s1", "save": "TMP/lost", "via": "VIA"}, 409, "root"),
    ("POST", "resurrect", {"old_root": "s3", "save": "TMP/lost", "via": "VIA"}, 409, "not an"),
    (
        "POST",
        "resurrect",
        {"old_root": "s1", "save": "/no/such/dir/x", "via": "VIA"},
        400,
        "does not exist",
    ),
    ("POST", "resurrect", {"old_root": "s1", "save": "lost.jsonl", "via": "VIA"}, 422, "save"),
]
# fmt: on


async def test_bad_input_is_refused_and_changes_nothing(agent: NodeAgent, cset: Set) -> None:
    s = cset
    port = str(free_port())  # nothing listens there: connection refused at once
    sql(s.dir / "plain.db", "CREATE TABLE t (a INTEGER)")  # a database that is not a node

    def fill(value: Any) -> Any:
        if not isinstance(value, str):
            return value
        value = value.replace("TMP", str(s.dir)).replace("PORT", port)
        if value == "VIA":
            return s.loc("s1")
        return s.loc(value[4:]) if value.startswith("LOC_") else value

    async with client(agent) as c:
        await build(c, s)
        before = s.snapshot()
        for method, op, given, code, needle in BAD:
            request = {k: fill(v) for k, v in given.items()}
            if method == "GET":
                res = await c.get(f"{PREFIX}/{op}", params=request)
            else:
                res = await c.post(f"{PREFIX}/{op}", json=request)
            case = (method, op, request, res.status_code, res.text)
            assert res.status_code == code, case
            assert needle in res.text, case
            assert SECRET not in res.text, case
            assert "Traceback" not in res.text, case
            detail = res.json()["detail"]
            if code != 422:
                assert isinstance(detail, str) and "\n" not in detail, case
            assert s.snapshot() == before, f"{case} changed the set"
        # A body that is not JSON at all.
        res = await c.post(f"{PREFIX}/emit", content=b"{nope",
                           headers={"content-type": "application/json"})  # fmt: skip
        assert res.status_code == 422
        assert s.snapshot() == before


async def test_validation_errors_never_echo_a_password(agent: NodeAgent) -> None:
    # FastAPI's own 422s echo the request's input; the cascade routes' do not.
    async with client(agent) as c:
        for body in ({"location": PG}, {"name": "x", "location": PG, "set": "T", "x": PG},
                     {"name": 1, "location": PG, "set": "T"}):  # fmt: skip
            res = await c.post(f"{PREFIX}/create-root", json=body)
            assert res.status_code == 422 and SECRET not in res.text, res.text
        res = await c.get(f"{PREFIX}/status", params={"via": PG, "token": SECRET})
        assert res.status_code == 422 and SECRET not in res.text, res.text


# -- the token -----------------------------------------------------------------------------------

ROUTES = {
    ("POST", "create-root"), ("POST", "create-branch"), ("POST", "create-leaf"),
    ("POST", "add-table"), ("POST", "remove-table"), ("GET", "tables"), ("GET", "missing"),
    ("POST", "emit"), ("POST", "change-provider"), ("GET", "candidates"), ("POST", "tag-dead"),
    ("POST", "tag-alive"), ("POST", "pause"), ("POST", "resume"), ("POST", "switchover"),
    ("POST", "failover"), ("POST", "resurrect"), ("GET", "status"), ("GET", "members"),
    ("GET", "check"), ("POST", "create-node"), ("POST", "add-seq"), ("POST", "remove-seq"),
    ("GET", "seqs"), ("GET", "fkeys"), ("GET", "triggers"), ("POST", "execute"),
    ("POST", "node-switchover"), ("POST", "node-failover"), ("GET", "root"),
    ("POST", "auto-failover"), ("POST", "sync"), ("POST", "compare"), ("POST", "repair"),
    ("POST", "resync"),
}  # fmt: skip


@pytest.mark.parametrize("token", [None, "wrong-token-0123456789"])
async def test_every_cascade_route_needs_the_token(
    agent: NodeAgent, cset: Set, token: str | None
) -> None:
    paths = build_app(agent).openapi()["paths"]
    routes = {
        (m.upper(), p.removeprefix(f"{PREFIX}/"))
        for p, methods in paths.items()
        if p.startswith(PREFIX)
        for m in methods
    }
    assert routes == ROUTES
    s_loc = cset.loc("s1")
    node_ops.create_root("s1", s_loc, "S")

    def seen() -> tuple[Any, ...]:
        with open_node_db(s_loc) as db:
            return db.state(), db.nodes(), db.tables(), db.pending()

    before = seen()
    async with client(agent, token=token) as c:
        for method, op in sorted(routes):
            body = {"node": "s1", "via": s_loc, "name": "x", "location": s_loc, "set": "S"}
            res = await c.request(method, f"{PREFIX}/{op}", json=body, params={"via": s_loc})
            assert res.status_code == 401, (op, res.text)
            assert res.json() == {"detail": "Unauthorized"} and TOKEN not in res.text
    assert seen() == before
