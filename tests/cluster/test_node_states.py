"""A SIGKILLed node, as a survivor's ``/v1/status`` shows it: live, then suspect, then dead two
ttl later, never back (issue 10: it showed dead for ~20 ms before suspect in 2 of 6 trials)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from baton.local.cluster import LocalCluster
from baton.testing.servers import RedisServer

pytestmark = pytest.mark.cluster

TTL = 2.0


def test_killed_node_goes_suspect_then_dead_once(tmp_path: Path) -> None:
    with LocalCluster(2, None, tmp_path, ttl=TTL) as c:
        c.wait_for(lambda: list(c.states().values()) == ["live"] * 2, timeout=30)
        victim, _ = c.wait_for(c.controller)
        survivor = c.node(next(n for n in c.nodes if n != victim))
        c.kill(victim)
        seen: list[tuple[float, str]] = []
        deadline = time.monotonic() + 4 * TTL + 5
        # Poll as fast as the node answers, until it has said dead for a while.
        while time.monotonic() < deadline:
            st = survivor.status()
            if st is not None:
                state = next(n["state"] for n in st["nodes"] if n["id"] == victim)
                if not seen or seen[-1][1] != state:
                    seen.append((time.monotonic(), state))
                if state == "dead" and time.monotonic() - seen[-1][0] > 0.5:
                    break
        states = [s for _, s in seen]
        assert states in (["live", "suspect", "dead"], ["suspect", "dead"]), seen
        at = dict((s, t) for t, s in seen)
        # Dead two ttl after the lapse was first seen (the survivor may see it a poll before
        # this loop does; a loaded machine answers late).
        assert 2 * TTL - 0.5 <= at["dead"] - at["suspect"] <= 2 * TTL + 2, seen


def test_node_records_come_back_after_the_store_lost_its_data(tmp_path: Path) -> None:
    """A node's record lives under its membership lease; when the store loses its data (a
    Redis restarted empty) the nodes take membership again and must publish their records
    again: they did not, so the controller saw no node and placed nothing, for good (found by
    the fault campaign of issue 12)."""
    import redis

    server = RedisServer(tmp_path / "redis").start()
    try:
        with LocalCluster(2, server.url, tmp_path / "c", ttl=TTL) as c:
            both = {n: "live" for n in c.nodes}
            c.wait_for(lambda: c.states() == both, timeout=30)
            client = redis.Redis.from_url(server.url)
            client.flushall()
            client.close()
            c.wait_for(lambda: c.states() == both, timeout=10 * TTL)
    finally:
        server.stop()
