"""The cascade collector: what a node agent's ``/metrics`` says of the members it holds, read
from the node databases at scrape time (no Spark: the test applies nothing, it ticks the root
and beats as the services would)."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from baton.cascade.beat import Phase
from baton.cascade.db import open_node_db
from baton.cascade.ticker import TickerConfig, tick_once
from baton.service.metrics import SERIES, CascadeCollector, Served
from baton.testing.cascade import root_and_branch, served
from tests.cascade.test_commands_part2 import step


def scrape(collector: CascadeCollector) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    registry = CollectorRegistry()
    registry.register(collector)
    text = generate_latest(registry).decode()
    return {
        (s.name, frozenset(s.labels.items())): float(s.value)
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def key(name: str, **labels: str) -> tuple[str, frozenset[tuple[str, str]]]:
    return name, frozenset(labels.items())


def test_members_lag_roles_and_worker_states(tmp_path: Path) -> None:
    loc = root_and_branch(tmp_path)
    with sqlite3.connect(tmp_path / "s1.db") as conn:
        conn.execute("INSERT INTO accounts VALUES (1, 10, 'a', 0)")
    with open_node_db(loc["s1"]) as db:
        made = tick_once(db, TickerConfig(idle=0.0), time.time() + 1)
        assert made is not None
        last = made.tick_id
    with open_node_db(loc["s2"]) as db:
        behind = db.state().position
    assert last > behind

    holding = [Served(loc["s1"], leading=True), Served(loc["s2"], leading=False)]
    collector = CascadeCollector("n1", lambda: holding)
    with served(loc["s1"], phase=Phase.TICKING):
        got = scrape(collector)
    s1 = {"node": "n1", "set": "S", "member": "s1"}
    s2 = {"node": "n1", "set": "S", "member": "s2"}
    assert got[key("baton_cascade_member_role", **s1, role="root")] == 1.0
    assert got[key("baton_cascade_member_role", **s2, role="branch")] == 1.0
    assert got[key("baton_cascade_member_role", **s2, role="root")] == 0.0
    assert got[key("baton_cascade_worker_state", **s1, state="running")] == 1.0
    assert got[key("baton_cascade_worker_state", **s2, state="standby")] == 1.0
    assert got[key("baton_cascade_applied_tick", **s1)] == last
    assert got[key("baton_cascade_applied_tick", **s2)] == behind
    assert got[key("baton_cascade_lag_ticks", **s1)] == 0.0
    assert got[key("baton_cascade_lag_ticks", **s2)] == last - behind
    assert got[key("baton_cascade_lag_seconds", **s2)] >= 0.0
    assert got[key("baton_cascade_set_root", node="n1", set="S", root="s1")] == 1.0
    assert key("baton_cascade_global_watermark", node="n1", set="S") in got
    assert got[key("baton_cascade_apply_seconds_count", **s2)] == 0.0
    assert got[key("baton_cascade_tables", **s1, state="ok")] == 1.0
    copying = {k[1]: v for k, v in got.items() if k[0] == "baton_cascade_tables"}
    assert sum(v for labels, v in copying.items() if ("member", "s2") in labels) == 1.0
    assert key("baton_cascade_events_applied_total", **s1) not in got  # the root applies none

    # The branch applies the batch as its worker would: its counts come with it.
    result = step(loc["s1"], loc["s2"])
    assert result.applied
    got = scrape(collector)
    assert got[key("baton_cascade_lag_ticks", **s2)] == 0.0
    assert got[key("baton_cascade_lag_seconds", **s2)] == 0.0
    events = got[key("baton_cascade_events_applied_total", **s2)]
    assert events >= 1  # the row, and the ticks' own events
    assert got[key("baton_cascade_batch_events_count", **s2)] == 1.0
    assert got[key("baton_cascade_batch_events_sum", **s2)] == events
    assert got[key("baton_cascade_batch_events_bucket", **s2, le="+Inf")] == 1.0
    assert got[key("baton_cascade_apply_seconds_count", **s2)] == 1.0
    assert got[key("baton_cascade_apply_seconds_sum", **s2)] > 0.0
    assert {name for name, _ in got} == set(SERIES)

    # Led here but nothing beats for it (never served): the worker is stopped.
    collector.served = lambda: [Served(loc["s2"], leading=True)]
    got = scrape(collector)
    assert got[key("baton_cascade_worker_state", **s2, state="stopped")] == 1.0
    assert got[key("baton_cascade_worker_state", **s2, state="running")] == 0.0

    # An unreadable database exports nothing for it, and the scrape still answers.
    collector.served = lambda: [Served(f"sqlite://{tmp_path / 'gone' / 'x.db'}", leading=True)]
    assert not scrape(collector)
