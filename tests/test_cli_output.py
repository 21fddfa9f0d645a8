"""What commands print, run as the real executable: ``-o table|wide|json|yaml`` (``--json`` the
same as ``-o json``), ``--no-headers``, one JSON shape (one document on one line, ISO-8601 UTC
timestamps, seconds and epochs as numbers), ``cascade status`` drawn as the set's tree, its
``--watch`` until Ctrl-C, and the shell completion script. No Spark: the set is built through
the Python API and its services are heartbeats written by this test."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import os
import re
import subprocess
from typing import Any

import pytest
import yaml

from baton.cascade import beat, commands, node_ops
from baton.cascade.beat import Beat, Phase
from baton.cascade.db import open_node_db
from baton.cascade.model import Role
from baton.keys import MEMBERS, NODES
from baton.store import open_store
from baton.testing.cascade import served
from tests.test_cli import BATON, baton, interrupted, one_line_error, sigint_as_a_shell_leaves_it

#: A node's start, 2026-11-28 02:55:45.355 UTC, as its record keeps it (seconds).
STARTED = 1795834545.355
BOX = set("┏┃━┡╇┘")  # rich's borders (the tree draws with │ ├ └ ─)


def ok(res: subprocess.CompletedProcess[str]) -> str:
    assert res.returncode == 0, res.stderr
    assert "Traceback" not in res.stderr
    return res.stdout


def one_document(text: str) -> Any:
    """The JSON a command printed: one document on one line."""
    assert text.endswith("\n") and text.count("\n") == 1, text
    return json.loads(text)


def iso(value: Any) -> dt.datetime:
    """An ISO-8601 UTC timestamp as every command's JSON has it (``...Z``)."""
    assert isinstance(value, str) and value.endswith("Z"), value
    at = dt.datetime.fromisoformat(value)
    assert at.utcoffset() == dt.timedelta(0)
    return at


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> str:
    """An SQLite store with node n1 (its record, and its membership held for an hour) and
    lease svc/one held by host-a."""
    url = f"sqlite://{tmp_path_factory.mktemp('out') / 's.db'}"

    async def fill() -> None:
        async with open_store(url) as s:
            record = {
                "id": "n1", "address": "127.0.0.1:7400", "version": "0.1.0", "capacity": 4,
                "labels": {"zone": "a"}, "started_at": STARTED, "types": ["counter"],
            }  # fmt: skip
            await s.put(NODES + "n1", json.dumps(record).encode())
            assert await s.acquire(MEMBERS + "n1", "n1", 3600) is not None
            assert await s.acquire("svc/one", "host-a", 3600) is not None

    asyncio.run(fill())
    return url


def test_status_in_every_format(store: str) -> None:
    s = ["--store", store]
    doc = one_document(ok(baton("status", "-o", "json", *s)))
    (node,) = doc["nodes"]
    assert (node["id"], node["state"], node["capacity"]) == ("n1", "live", 4)
    assert iso(node["started_at"]) == dt.datetime(2026, 11, 28, 2, 55, 45, 355000, tzinfo=dt.UTC)
    assert isinstance(node["epoch"], int)
    iso(doc["store_time"])
    # --json is -o json; YAML carries the same document.
    same = one_document(ok(baton("status", "--json", *s)))
    from_yaml = yaml.safe_load(ok(baton("status", "-o", "yaml", *s)))
    for other in (same, from_yaml):
        assert other["nodes"] == doc["nodes"] and other["controller"] is None
    table = ok(baton("status", *s))
    assert table.splitlines()[0] == "controller: none"
    assert "capacity" in table and "started" not in table
    wide = ok(baton("status", "-o", "wide", *s))
    assert "started" in wide and "2026-11-28 02:55:45 UTC" in wide and "counter" in wide
    bare = ok(baton("status", "--no-headers", *s)).splitlines()
    assert bare[0] == "controller: none"
    assert re.split(r"\s{2,}", bare[1].strip()) == [
        "n1", "live", "127.0.0.1:7400", "4", "zone=a", "0.1.0",
    ]  # fmt: skip
    assert len(bare) == 2 and not BOX & set("".join(bare))
    res = baton("status", "--json", "-o", "yaml", *s)
    one_line_error(res, "--json is -o json")
    assert res.returncode == 2 and res.stdout == ""


def test_lease_list_in_every_format(store: str) -> None:
    s = ["--store", store, "--prefix", "svc/"]
    (lease,) = one_document(ok(baton("lease", "list", "-o", "json", *s)))
    assert (lease["name"], lease["holder"], lease["ttl"]) == ("svc/one", "host-a", 3600)
    assert isinstance(lease["epoch"], int) and 3500 < lease["expires_in"] <= 3600
    # The epoch's digits are when it was granted: the same instant as granted_at says.
    granted = iso(lease["granted_at"])
    assert abs(granted.timestamp() * 1e6 - lease["epoch"]) < 1000
    assert 3500 < (iso(lease["expires_at"]) - granted).total_seconds() <= 3601
    assert yaml.safe_load(ok(baton("lease", "list", "-o", "yaml", *s)))[0]["name"] == "svc/one"
    wide = ok(baton("lease", "list", "-o", "wide", *s))
    assert "expires at" in wide and "expires at" not in ok(baton("lease", "list", *s))
    (row,) = ok(baton("lease", "list", "--no-headers", *s)).splitlines()
    assert re.split(r"\s{2,}", row.strip())[:3] == ["svc/one", "host-a", str(lease["epoch"])]


@pytest.fixture(scope="module")
def cascade_set(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Root s1; branch s2 under it with leaf s3 under s2; leaf s4 under s1. s3 is paused and
    s4's service stopped; nothing ever served s1."""
    d = tmp_path_factory.mktemp("set")
    loc = {n: f"sqlite://{d / n}.db" for n in ("s1", "s2", "s3", "s4")}
    node_ops.create_root("s1", loc["s1"], "S")
    node_ops.create_subscriber(Role.BRANCH, "s2", loc["s2"], "s1", loc["s1"])
    node_ops.create_subscriber(Role.LEAF, "s3", loc["s3"], "s2", loc["s1"])
    node_ops.create_subscriber(Role.LEAF, "s4", loc["s4"], "s1", loc["s1"])
    commands.set_paused(loc["s1"], "s3", True)
    with open_node_db(loc["s4"]) as db:
        beat.write(db, Beat("host:1", 1, 1.0, Phase.APPLYING, stopped=True))
    return loc


def rows(text: str) -> list[list[str]]:
    """The table rows of ``cascade status --no-headers``: the node with its place in the tree
    (``│  └─ s3``), then the other cells (two spaces apart)."""
    found = [re.fullmatch(r"([│├└─ ]*s\d)\s+(.*?)\s*", line) for line in text.splitlines()]
    return [[m[1], *re.split(r"\s{2,}", m[2])] for m in found if m]


def test_cascade_status_is_the_sets_tree(cascade_set: dict[str, str]) -> None:
    via = ["--via", cascade_set["s1"]]
    with served(cascade_set["s2"]):  # s2's worker applies
        bare = ok(baton("cascade", "status", "--no-headers", *via))
        table = ok(baton("cascade", "status", *via))
    assert bare.startswith("set S: root s1, global watermark")
    assert [r[:2] for r in rows(bare)] == [
        ["s1", "root"],
        ["├─ s2", "branch"],
        ["│  └─ s3", "leaf"],
        ["└─ s4", "leaf"],
    ], bare
    # Each node's position, lag in ticks and seconds, worker and state.
    assert [r[2:] for r in rows(bare)] == [
        ["1", "0", "0", "never", "ok"],
        ["1", "0", "0", "applying", "ok"],
        ["1", "0", "0", "never", "paused"],
        ["1", "0", "0", "stopped", "ok"],
    ], bare
    assert not BOX & set(bare)
    assert "node" in table and "worker" in table and "└─ s4" in table
    wide = ok(baton("cascade", "status", "-o", "wide", "--no-headers", *via))
    s3 = rows(wide)[2]
    assert s3[0] == "│  └─ s3" and s3[2] == "s2" and s3[-1] == cascade_set["s3"], s3
    # JSON: the members, as before the tree (each with its provider); timestamps ISO-8601.
    doc = one_document(ok(baton("cascade", "status", "-o", "json", *via)))
    assert [(m["name"], m["provider"]) for m in doc["members"]] == [
        ("s1", None), ("s2", "s1"), ("s3", "s2"), ("s4", "s1"),
    ]  # fmt: skip
    iso(doc["members"][0]["tick_time"])
    stopped = doc["members"][3]["service"]
    assert stopped["state"] == "stopped" and stopped["at"] == "1970-01-01T00:00:01.000Z"
    assert one_document(ok(baton("cascade", "members", "--json", *via))) == doc["members"]
    assert yaml.safe_load(ok(baton("cascade", "status", "-o", "yaml", *via))) == doc


def test_cascade_status_watch_until_ctrl_c(cascade_set: dict[str, str]) -> None:
    """Two snapshots, one JSON document per line; Ctrl-C ends it with 130, no traceback."""
    argv = [BATON, "cascade", "status", "--via", cascade_set["s1"], "--watch", "0.2", "-o", "json"]
    proc = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=dict(os.environ),
        preexec_fn=sigint_as_a_shell_leaves_it,  # noqa: PLW1509 (two signal calls, no lock)
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        docs = [json.loads(proc.stdout.readline()) for _ in range(2)]
        assert [d["root"] for d in docs] == ["s1", "s1"]
        interrupted(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_shell_completion() -> None:
    """What docs/cli.md tells a user to put in their shell's start-up file, and what it asks."""
    script = baton(env={"_BATON_COMPLETE": "bash_source"})
    assert script.returncode == 0 and "complete -o nosort -F _baton_completion baton" in (
        script.stdout
    ), script.stdout
    words = baton(env={"_BATON_COMPLETE": "bash_complete", "COMP_WORDS": "baton cas",
                       "COMP_CWORD": "1"})  # fmt: skip
    assert "plain,cascade" in words.stdout.splitlines(), words.stdout
