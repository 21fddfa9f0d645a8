"""An object's spec is checked by its workload type when the object is created (one line,
nothing written), and a member that cannot start anyway is isolated: its node reports the
error, its group shows it, the node's other groups converge, and the sync command answers a
documented 422 instead of failing (issue 10)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from baton.errors import ConfigError, SpecError
from baton.keys import GROUPS, OBJECTS
from baton.node.agent import NodeAgent
from baton.placement.records import (
    GroupRecord,
    ObjectSpec,
    create_object,
    dump,
    make_object,
    read_objects,
)
from baton.placement.runner import Runner
from baton.placement.view import placement_view
from baton.placement.workload import Counter, Workload, load_types
from baton.store import Store, open_store
from baton.testing import await_for
from tests.node.test_api import client, config
from tests.test_cli import baton, one_line_error

BAD_COUNTER_SPECS: list[tuple[dict[str, Any], str]] = [
    ({"interval": "fast"}, "valid number"),
    ({"interval": -1}, "greater than or equal to 0.001"),
    ({"interval": 0}, "greater than or equal to 0.001"),
    ({"interval": 1e300}, "less than or equal to 3600"),
    ({"interval": True}, "valid number"),
    ({"intervall": 1}, "not a setting of counter"),
]


@pytest.mark.parametrize(("spec", "needle"), BAD_COUNTER_SPECS)
def test_counter_refuses_a_spec_it_cannot_use(spec: dict[str, Any], needle: str) -> None:
    with pytest.raises(SpecError, match=needle) as info:
        Counter.validate_spec(spec)
    assert "counter spec." in str(info.value) and "\n" not in str(info.value)


def test_spec_hooks_of_the_builtin_types() -> None:
    types = load_types()
    assert Counter.validate_spec({}) == {}  # defaults are not written into the object
    assert Counter.validate_spec({"interval": 1}) == {"interval": 1.0}
    worker = types["cascade-worker"]
    assert worker.validate_spec({"location": "sqlite:///d/s2.db"}) == {
        "location": "sqlite:///d/s2.db"
    }
    low = {"location": "sqlite:///d/s2.db", "mode": "low-latency"}
    assert worker.validate_spec(low) == low
    for bad in (
        {},
        {"location": 3},
        {"location": "mysql://h/db"},
        {"location": "x", "y": 1},
        {"location": "sqlite:///d/s2.db", "mode": "fast"},
    ):
        with pytest.raises(SpecError, match="cascade-worker spec"):
            worker.validate_spec(bad)
    with pytest.raises(SpecError) as info:  # a refused URL is shown without its password
        worker.validate_spec({"location": "mysql://u:hunter2@h/db"})
    assert "hunter2" not in str(info.value) and "'mysql://u:***@h/db'" in str(info.value)

    class Free(Workload):  # a type without a spec model takes any spec
        type_name = "free"

    assert Free.validate_spec({"anything": [1, 2]}) == {"anything": [1, 2]}
    assert issubclass(SpecError, ConfigError)


async def test_create_refuses_a_bad_spec_and_writes_nothing(store: Store) -> None:
    for spec, needle in BAD_COUNTER_SPECS:
        with pytest.raises(SpecError, match=needle):
            await create_object(store, make_object("counter", "bad", 1, 3, spec=spec))
    with pytest.raises(SpecError, match=r"object 'w': cascade-worker spec\.location"):
        await create_object(store, make_object("cascade-worker", "w", 1, 2, spec={}))
    assert await read_objects(store) == {}
    # A type this process does not know (a node's [workloads] entry) is checked by the node.
    await create_object(store, make_object("gauge", "g", 1, 1, spec={"interval": "fast"}))
    assert list(await read_objects(store)) == ["g"]


@pytest.mark.parametrize("spec", ['{"interval": "fast"}', '{"interval": -1}'])
def test_cli_refuses_a_bad_spec_in_one_line(tmp_path: Path, spec: str) -> None:
    s = ["--store", f"sqlite://{tmp_path / 's.db'}"]
    res = baton("object", "create", "counter", "bad", "--replicas", "3", "--spec", spec, *s)
    one_line_error(res, "object 'bad'", "counter spec.interval", "0.001 to 3600")
    # Refused before the store was opened: it was not even created.
    assert not (tmp_path / "s.db").exists()


async def _put_unchecked(store: Store, obj: ObjectSpec, leader: str) -> None:
    """Store ``obj`` as a version without the spec check would have, with its group led by
    ``leader``."""
    await store.put(OBJECTS + obj.name, dump(obj))
    group = GroupRecord(
        object=obj.name,
        type=obj.type,
        partition=0,
        members=(leader,),
        leader=leader,
        term=7,
        state="placing",
    )
    await store.put(GROUPS + group.key, dump(group))


async def _no_fetch(node: str, group: str, request: dict[str, Any]) -> dict[str, Any]:
    raise AssertionError("a leader fetches nothing")


async def test_runner_isolates_a_member_that_cannot_start(store: Store, tmp_path: Path) -> None:
    bad = ObjectSpec(name="bad", type="counter", replicas=3, spec={"interval": "fast"})
    await _put_unchecked(store, bad, "a")
    await _put_unchecked(store, ObjectSpec(name="good", type="counter"), "a")
    await _put_unchecked(store, ObjectSpec(name="alien", type="nope"), "a")
    runner = Runner(
        "a", store, data_dir=tmp_path, types=load_types(), fetch=_no_fetch, may_lead=lambda: True
    )
    try:
        failed = await runner.sync(["alien/0", "bad/0", "good/0"])
        assert set(failed) == {"alien/0", "bad/0"}
        assert "counter spec.interval: Input should be a valid number" in failed["bad/0"]
        assert "does not run workload type 'nope'" in failed["alien/0"]
        report = {r["group"]: r for r in runner.report()}
        assert (report["good/0"]["role"], report["good/0"]["term"]) == ("leader", 7)
        assert report["good/0"]["error"] == ""
        assert report["bad/0"]["role"] == "none" and report["bad/0"]["error"] == failed["bad/0"]
        assert report["bad/0"]["commit_index"] == -1  # never chosen for its data
        # Asked again, it is tried again (and still fails); deleted, it is gone.
        assert await runner.sync(["bad/0"]) == {"bad/0": failed["bad/0"]}
        await store.delete(GROUPS + "bad/0")
        assert await runner.sync(["bad/0"]) == {}
        assert "bad/0" not in {r["group"] for r in runner.report()}
    finally:
        await runner.close()


@pytest.fixture
async def agent(tmp_path: Path) -> AsyncIterator[NodeAgent]:
    a = NodeAgent(config(tmp_path, "a"))
    await a.start()
    await a.controller.wait_leadership(10)
    yield a
    await a.stop()


async def test_sync_naming_a_bad_member_answers_422_and_runs_the_others(agent: NodeAgent) -> None:
    async with open_store(agent.config.store) as store:
        await store.put(
            OBJECTS + "bad", dump(ObjectSpec(name="bad", type="counter", spec={"interval": "fast"}))
        )
        await create_object(store, make_object("counter", "good", 1, 1))

    async def placed() -> dict[str, dict[str, Any]] | None:
        groups = {g["group"]: g for g in (await placement_view(agent.store))["groups"]}
        return groups if len(groups) == 2 and all(g["leader"] for g in groups.values()) else None

    # The controller (this node) places both; the test delivers the sync (no HTTP server).
    groups = await await_for(placed, timeout=10)
    epoch = agent.controller.epoch
    cmd = {
        "sender": "a",
        "role": "controller",
        "epoch": epoch,
        "command": "sync",
        "groups": ["bad/0", "good/0"],
    }
    async with client(agent) as c:
        res = await c.post("/v1/commands", json=cmd)
        assert res.status_code == 422, res.text
        body = res.json()
        assert body["accepted"] is True and list(body["failed"]) == ["bad/0"]
        assert "spec.interval" in body["failed"]["bad/0"] and "bad/0" in body["detail"]
        rows = {r["group"]: r for r in (await c.get("/v1/groups")).json()["groups"]}
        assert (rows["good/0"]["role"], rows["good/0"]["term"]) == (
            "leader",
            groups["good/0"]["term"],
        )
        assert rows["bad/0"]["error"] == body["failed"]["bad/0"]
