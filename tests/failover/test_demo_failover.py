"""The store-failover part of ``baton demo`` on its own, with real ``redis-server`` and
``baton redis-failover`` processes: it reports every step as done and leaves no process
behind."""

from __future__ import annotations

import io
import os
from pathlib import Path

from rich.console import Console

from baton.demo.failover import failover_part
from baton.local.processes import descendants

EXPECTED = [
    "store failover: 2 Redis servers, 2 clients, 1 server",
    "store failover: every client agreed",
    "worker carried on at the new master",
    "old master returned as a replica",
    "planned switch back: 0 acknowledged writes lost",
]


def test_failover_part_shows_a_switch_every_client_agrees_to(tmp_path: Path) -> None:
    out = io.StringIO()
    console = Console(file=out, width=120)
    steps: list[tuple[str, float, str, bool]] = []

    def step(what: str, seconds: float, detail: str, ok: bool) -> None:
        steps.append((what, seconds, detail, ok))

    before = set(descendants(os.getpid()))
    ok = failover_part(console, tmp_path, step)
    report = "\n".join(map(str, steps)) + "\n" + out.getvalue()
    assert ok, report
    assert [s[0] for s in steps] == EXPECTED, report
    assert all(s[3] for s in steps), report
    # Every Redis server and baton process it started was stopped (and reaped) before it
    # returned: no child of this test is left over.
    assert set(descendants(os.getpid())) <= before, report
    assert "none lost" in out.getvalue()
