"""A node agent runs automatic failover's actor (issue 30): in process, real time, a real
SQLite store and node databases, no Spark. Nodes s1 (root) and s2 (branch) are served the way
``baton cascade run`` serves them, by their cascade leases (the test holds s2's; s1's holder is
gone), and s2's host reports it cannot reach s1 (the probe itself is tested in
tests/cascade/test_auto_failover_actor.py). With the switch off the agent does nothing; on,
it promotes s2, says so in one log line and counts it in ``/metrics``."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from baton.cascade import commands, node_ops
from baton.cascade.db import open_node_db
from baton.cascade.model import Role
from baton.keys import cascade_lease
from baton.local.waiting import await_for
from baton.node.agent import NodeAgent
from baton.service.reach import Reach, report
from baton.testing.workload import create_accounts
from tests.cascade.test_root_writer import catch_up, tick
from tests.node.test_api import config


def role(location: str) -> Role:
    with open_node_db(location, readonly=True) as db:
        return db.state().role


async def test_the_agent_fails_a_lost_root_over_only_when_switched_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    loc = {n: f"sqlite://{tmp_path / n}.db" for n in ("s1", "s2")}
    for n in loc:
        create_accounts(tmp_path / f"{n}.db")
    commands.create_root("s1", loc["s1"], "S")
    commands.create_subscriber(Role.BRANCH, "s2", loc["s2"], "s1", loc["s1"])
    commands.add_table(loc["s1"], "accounts", None, True)
    node_ops.copy_table(loc["s2"], "accounts")
    tick(loc["s1"])
    catch_up(loc["s2"])
    caplog.set_level(logging.INFO, "baton.cascade")
    agent = NodeAgent(config(tmp_path, "a"))
    await agent.start()
    try:
        store = agent.store
        assert await store.acquire(cascade_lease("S", "s2"), "runner-s2", 60) is not None
        await report(store, Reach("S", "s2", "s1", False, "s1 is not served", loc["s2"]), None)
        actor = agent.auto_failover
        await await_for(lambda: actor.election.is_leader, timeout=20)

        def decided(action: str) -> bool:
            return any(
                r.getMessage() == "auto-failover decision" and vars(r)["action"] == action
                for r in caplog.records
            )

        # Off: the actor leads and passes, and does not even look at the set.
        await await_for(lambda: actor.passes >= 2, timeout=20)
        assert not decided("failover") and not decided("wait") and role(loc["s1"]) is Role.ROOT
        commands.auto_failover(loc["s2"], "S", True)
        await report(store, Reach("S", "s2", "s1", False, "s1 is not served", loc["s2"]), None)
        # The decision's line comes once the failover is done.
        await await_for(lambda: decided("failover"), timeout=20)
        assert role(loc["s2"]) is Role.ROOT
        metrics = agent.metrics.registry
        done = {"set": "S", "outcome": "done"}
        assert metrics.get_sample_value("baton_cascade_auto_failovers_total", done) == 1
        with open_node_db(loc["s2"], readonly=True) as db:
            assert db.nodes()["s1"][1] is True  # tagged dead
    finally:
        await agent.stop()
