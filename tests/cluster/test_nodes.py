"""Node agents as real processes: a controller is elected, and replaced after a SIGKILL (within
the ttl) and after a graceful stop (at once: the lease is released)."""

from __future__ import annotations

import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from baton.testing import free_port, wait_for
from baton.testing.processes import Proc
from tests.conftest import Backend

TOKEN = "cluster-token-0123456789"
pytestmark = pytest.mark.cluster


class Node:
    def __init__(self, tmp: Path, url: str, node_id: str) -> None:
        self.id = node_id
        self.port = free_port()
        env = {
            "BATON_NODE_ID": node_id,
            "BATON_STORE": url,
            "BATON_TOKEN": TOKEN,
            "BATON_DATA_DIR": str(tmp),
            "BATON_LISTEN": f"127.0.0.1:{self.port}",
            "BATON_TTL": "2",
        }
        baton = str(Path(sys.executable).with_name("baton"))
        self.proc = Proc(node_id, [baton, "node"], tmp / f"{node_id}.out", env=env)

    def status(self) -> dict[str, Any] | None:
        try:
            res = httpx.get(
                f"http://127.0.0.1:{self.port}/v1/status",
                headers={"authorization": f"Bearer {TOKEN}"},
                timeout=2,
            )
        except httpx.HTTPError:
            return None
        return res.json() if res.status_code == 200 else None


@pytest.fixture
def nodes(backend: Backend, tmp_path: Path) -> Iterator[list[Node]]:
    started = [Node(tmp_path, backend.url, f"n{i}") for i in range(3)]
    yield started
    for n in started:
        n.proc.stop()


def controller(nodes: list[Node], above: int = 0) -> tuple[str, int] | None:
    for n in nodes:
        if n.proc.popen.poll() is not None:
            continue
        st = n.status()
        ctl = st and st["controller"]
        if ctl and ctl["epoch"] > above:
            return ctl["id"], ctl["epoch"]
    return None


def states(node: Node) -> list[str]:
    st = node.status()
    return [x["state"] for x in st["nodes"]] if st else []


def test_controller_elected_then_replaced(nodes: list[Node]) -> None:
    first, epoch = wait_for(lambda: controller(nodes), timeout=30, what="a controller")
    wait_for(lambda: states(nodes[0]) == ["live"] * 3, timeout=20, what="three live nodes")
    st = nodes[0].status()
    assert st is not None and st["node"]["id"] == "n0"
    # SIGKILL the controller: another takes over within the ttl (plus slack).
    victim = next(n for n in nodes if n.id == first)
    victim.proc.kill()
    second, epoch2 = wait_for(lambda: controller(nodes, epoch), timeout=15, what="takeover")
    assert second != first and epoch2 > epoch
    # The killed node is reported suspect by the others (its membership lapsed).
    other = next(n for n in nodes if n.id not in (first, second))
    wait_for(
        lambda: any(
            x["id"] == first and x["state"] in ("suspect", "dead")
            for x in (other.status() or {"nodes": []})["nodes"]
        ),
        timeout=15,
        what="killed node no longer live",
    )
    # Graceful stop: the lease is released, so the last node takes over at once.
    leader = next(n for n in nodes if n.id == second)
    leader.proc.signal(signal.SIGTERM)
    wait_for(lambda: leader.proc.popen.poll() is not None, timeout=15, what="graceful exit")
    assert leader.proc.popen.returncode == 0, leader.proc.lines()
    third, epoch3 = wait_for(lambda: controller(nodes, epoch2), timeout=5, what="handover")
    assert third == other.id and epoch3 > epoch2
