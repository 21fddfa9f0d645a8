"""Node agents as real processes (LocalCluster) on every backend: a controller is elected and
replaced after a SIGKILL, after a SIGSTOP past the ttl (the resumed one is refused with its stale
epoch), and after a graceful stop (at once: the lease is released)."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest

from baton.local.cluster import LocalCluster
from tests.conftest import Backend

pytestmark = pytest.mark.cluster


def newer(c: LocalCluster, epoch: int) -> tuple[str, int] | None:
    ctl = c.controller()
    return ctl if ctl and ctl[1] > epoch else None


def test_controller_elected_then_replaced(backend: Backend, tmp_path: Path) -> None:
    with LocalCluster(3, backend.url, tmp_path, ttl=2) as c:
        first, epoch = c.wait_for(c.controller)
        c.wait_for(lambda: list(c.states().values()) == ["live"] * 3)
        # Every log line names the node, its role and that role's epoch.
        log = c.node(first).proc
        assert log is not None
        c.wait_for(lambda: any(f"role=controller epoch={epoch}" in x for x in log.lines()))
        assert all(f"node={first}" in x for x in log.lines() if x.startswith("ts="))
        # SIGKILL the controller: another takes over after the ttl.
        killed_at = time.monotonic()
        c.kill(first)
        second, epoch2 = c.wait_for(lambda: newer(c, epoch), timeout=15)
        assert second != first and epoch2 > epoch
        assert time.monotonic() - killed_at < 2 + 0.3 + 3  # ttl + election timeout + slack
        c.wait_for(lambda: c.states().get(first) in ("suspect", "dead"), timeout=15)
        # Graceful stop: released at once, so the last node takes over without waiting a ttl.
        c.terminate(second)
        proc = c.node(second).proc
        assert proc is not None
        c.wait_for(lambda: proc.popen.poll() is not None, timeout=15)
        assert proc.popen.returncode == 0, proc.lines()
        third, epoch3 = c.wait_for(lambda: newer(c, epoch2), timeout=5)
        assert third not in (first, second) and epoch3 > epoch2


def test_paused_controller_is_refused_when_it_returns(backend: Backend, tmp_path: Path) -> None:
    with LocalCluster(3, backend.url, tmp_path, ttl=2) as c:
        first, epoch = c.wait_for(c.controller)
        c.pause(first)
        second, epoch2 = c.wait_for(lambda: newer(c, epoch), timeout=15)
        c.resume(first)
        # The old controller's command, with its stale epoch, is refused by every node.
        for node in c.nodes.values():
            res = httpx.post(
                f"{node.url}/v1/commands",
                json={"sender": first, "role": "controller", "epoch": epoch, "command": "noop"},
                headers={"authorization": f"Bearer {c.token}"},
                timeout=5,
            )
            assert res.status_code == 409, res.text
        # And the resumed node no longer believes it is controller.
        old = c.node(first)
        c.wait_for(lambda: (old.status() or {}).get("node", {}).get("is_controller") is False)
        assert c.controller() == (second, epoch2)
