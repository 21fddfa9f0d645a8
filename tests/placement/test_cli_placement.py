"""``baton object``, ``baton drain`` and ``baton placement``: they work on every backend, and
bad input is one line that changes nothing."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import time
from pathlib import Path

import pytest

from baton.keys import NODES
from baton.store import open_store
from tests.conftest import Backend
from tests.test_cli import baton, one_line_error


def a_cluster_with(url: str, *nodes: str) -> None:
    """The store as a cluster leaves it once nodes ran (``baton up`` or ``baton node``
    create the store and each node publishes its record): the placement commands refuse to
    create a store, or to drain a node that never joined."""

    async def go() -> None:
        async with open_store(url) as store:
            for node in nodes:
                record = {"id": node, "types": ["counter", "cascade-worker"]}
                await store.put(NODES + node, json.dumps(record).encode())

    asyncio.run(go())


def test_object_lifecycle(backend: Backend) -> None:
    s = ["--store", backend.url]
    a_cluster_with(backend.url, "n1")
    res = baton("object", "create", "counter", "orders", "--partitions", "3", "--replicas", "2",
                "--spec", '{"interval": 0.2}', "--selector", "zone=a", *s)  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert "3 partition(s) x 2" in res.stdout
    listed = json.loads(baton("object", "list", "--json", *s).stdout)
    assert listed == [
        {
            "name": "orders",
            "type": "counter",
            "partitions": 3,
            "replicas": 2,
            "spec": {"interval": 0.2},
            "selector": {"zone": "a"},
            "created_at": listed[0]["created_at"],
        }
    ]
    # A timestamp is ISO-8601 UTC in every command's JSON (docs/cli.md, output formats).
    made = dt.datetime.fromisoformat(listed[0]["created_at"])
    assert made.tzinfo == dt.UTC and abs(time.time() - made.timestamp()) < 300
    table = baton("object", "list", *s).stdout
    assert "orders" in table and "zone=a" in table
    # The name is taken: refused, and the object is unchanged.
    again = baton("object", "create", "counter", "orders", "--replicas", "1", *s)
    one_line_error(again, "already exists")
    assert json.loads(baton("object", "list", "--json", *s).stdout) == listed
    # No controller ran: placement shows no groups yet, but works.
    view = json.loads(baton("placement", "--json", *s).stdout)
    assert view["groups"] == [] and view["objects"][0]["name"] == "orders"
    assert baton("drain", "n1", *s).returncode == 0
    assert json.loads(baton("placement", "--json", *s).stdout)["draining"] == ["n1"]
    assert baton("drain", "n1", "--undo", *s).returncode == 0
    assert json.loads(baton("placement", "--json", *s).stdout)["draining"] == []
    assert baton("object", "delete", "orders", *s).returncode == 0
    assert json.loads(baton("object", "list", "--json", *s).stdout) == []


@pytest.mark.parametrize(
    ("args", "needles"),
    [
        (["object", "create", "counter", "bad/name"], ["object name", "bad/name"]),
        (["object", "create", "counter", "x", "--partitions", "0"], ["partitions"]),
        (["object", "create", "counter", "x", "--replicas", "10"], ["replicas"]),
        (["object", "create", "counter", "x", "--spec", "{nope"], ["--spec", "JSON"]),
        (["object", "create", "counter", "x", "--spec", "[1]"], ["JSON object"]),
        (["object", "create", "counter", "x", "--selector", "zone"], ["--selector", "KEY=VALUE"]),
        (["object", "create", "Bad Type", "x"], ["object type"]),
        (["object", "delete", "nothing"], ["no object named", "nothing"]),
        (["drain", "bad id!"], ["node id"]),
        # Typos name what is wrong and what exists (issue 28, point 3).
        (["object", "create", "widget", "w1"], ["unknown workload type 'widget'", "counter"]),
        (["drain", "n9"], ["no node 'n9'", "the nodes are n1"]),
        (["drain", "n9", "--undo"], ["no node 'n9'"]),
        (["object", "create", "counter"], ["NAME"]),
    ],
)
def test_bad_input_changes_nothing(tmp_path: Path, args: list[str], needles: list[str]) -> None:
    s = ["--store", f"sqlite://{tmp_path / 's.db'}"]
    a_cluster_with(s[1], "n1")
    res = baton(*args, *s)
    one_line_error(res, *needles)
    assert json.loads(baton("object", "list", "--json", *s).stdout) == []
    assert json.loads(baton("placement", "--json", *s).stdout)["draining"] == []


@pytest.mark.parametrize(
    "args",
    [
        ["status"], ["nodes"], ["object", "list"], ["placement"], ["lease", "list"],
        ["drain", "n1"], ["object", "create", "counter", "x"],
    ],
)  # fmt: skip
def test_a_mistyped_store_is_refused_and_never_created(tmp_path: Path, args: list[str]) -> None:
    """Reading and placement commands never create an SQLite store: before, `baton status`
    made an empty file and answered "controller: none"."""
    missing = tmp_path / "missing.db"
    res = baton(*args, "--store", f"sqlite://{missing}")
    one_line_error(res, "no store at", str(missing), "baton up")
    assert not missing.exists()


def test_cascade_run_of_a_mistyped_node_creates_nothing(tmp_path: Path) -> None:
    store = f"sqlite://{tmp_path / 's.db'}"
    a_cluster_with(store)
    res = baton("cascade", "run", f"sqlite://{tmp_path / 'nothere.db'}", "--store", store)
    one_line_error(res, "nothere.db", "no such node database", "create-root")
    assert not (tmp_path / "nothere.db").exists()


def test_piped_output_is_not_wrapped(tmp_path: Path) -> None:
    """Issue 28: piped, a table cell was split at 80 columns (`accounts (catchin` / `g-up)`)."""
    s = ["--store", f"sqlite://{tmp_path / 's.db'}"]
    a_cluster_with(s[1], "n1")
    long = "z" * 120
    assert (
        baton("object", "create", "counter", "wide", "--selector", f"zone={long}", *s).returncode
        == 0
    )
    listed = baton("object", "list", *s).stdout
    assert any(f"zone={long}" in line for line in listed.splitlines()), listed
