"""Acceptance on etcd through the command line: node agents (``baton node`` with the store's
``etcd://`` URL) place an object and move it when its node is killed; a live channel's leader
keeps its lease in etcd and a survivor takes the channel over at a higher epoch; and the
cascade's node lease (``baton cascade run`` of a root, which needs no Spark) fences a frozen
service that wakes after its successor took over.

Each test runs in a namespace of its own on the session's one-member etcd."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from baton.cascade import beat, commands
from baton.cascade.db import open_node_db
from baton.channels.stream import lease_name
from baton.keys import cascade_lease
from baton.local.cluster import LocalCluster
from baton.local.processes import Proc
from baton.local.waiting import wait_for
from baton.store import Lease, open_store
from baton.testing.channels import Subscriber, channel_leaders
from baton.testing.servers import EtcdServer

pytestmark = pytest.mark.cluster

BATON = str(Path(sys.executable).with_name("baton"))
TTL = 2.0


def fresh_url(etcd: EtcdServer, what: str) -> str:
    return f"{etcd.store_url}?namespace={what}{uuid.uuid4().hex[:8]}"


def lease_in_store(url: str, name: str) -> Lease | None:
    """The lease ``name`` as etcd holds it now (None: free)."""

    async def go() -> Lease | None:
        async with open_store(url) as store:
            return await store.get_lease(name)

    return asyncio.run(go())


def said(proc: Proc, words: str) -> bool:
    return any(words in line for line in proc.lines())


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([BATON, *args], capture_output=True, text=True, timeout=60, check=False)


def test_placement_moves_an_object_off_a_killed_node(
    etcd_server: EtcdServer, tmp_path: Path
) -> None:
    url = fresh_url(etcd_server, "place")
    with LocalCluster(2, url, tmp_path, ttl=TTL, reconcile_interval=0.3) as c:
        c.wait_for(lambda: list(c.states().values()) == ["live"] * 2, timeout=30)
        made = cli("object", "create", "counter", "orders", "--replicas", "1", "--store", url)
        assert made.returncode == 0, made.stderr

        def placed_on(excluded: str = "") -> str | None:
            view = c.get("/v1/placement")
            groups = view["groups"] if view else []
            if len(groups) != 1 or groups[0]["state"] != "ok" or len(groups[0]["members"]) != 1:
                return None
            member: str = groups[0]["members"][0]
            return member if member != excluded and groups[0]["leader"] == member else None

        first = c.wait_for(placed_on, timeout=30)
        c.kill(first)  # the controller itself half the time: then its role moves too
        second = c.wait_for(lambda: placed_on(excluded=first), timeout=30)
        shown = cli("placement", "--json", "--store", url)
        assert shown.returncode == 0, shown.stderr
        (group,) = json.loads(shown.stdout)["groups"]
        assert group["members"] == [second] and group["leader"] == second


def test_channel_leader_killed_survivor_leads_at_a_higher_epoch(
    etcd_server: EtcdServer, tmp_path: Path
) -> None:
    url = fresh_url(etcd_server, "chan")
    channel = "tick:etcd,every=0.05"
    with LocalCluster(2, url, tmp_path, ttl=TTL) as c:
        c.wait_for(lambda: list(c.states().values()) == ["live"] * 2, timeout=30)
        # The first subscription anywhere (at n0) makes n0 the channel's leader.
        anchor = Subscriber([c.node("n0").url], c.token, channel).start()
        follower = Subscriber([c.node("n1").url], c.token, channel)
        try:
            wait_for(anchor.pubs, timeout=20, what="publications at n0")
            follower.start()
            wait_for(follower.pubs, timeout=20, what="publications relayed through n1")
            ((leader, epoch),) = wait_for(lambda: channel_leaders(c, channel))
            held = lease_in_store(url, lease_name(channel))
            assert held is not None and (held.holder, held.epoch) == (leader, epoch) == (
                "n0",
                epoch,
            )
            c.kill("n0")
            wait_for(
                lambda: follower.pubs() and follower.epoch() > epoch,
                timeout=20,
                what="n1's subscriber to receive from a new epoch",
            )
            taken = lease_in_store(url, lease_name(channel))
            assert taken is not None and taken.holder == "n1" and taken.epoch > epoch
            assert {m.epoch for m in follower.pubs()} <= {epoch, taken.epoch}
            seen = [(m.epoch, m.offset) for m in follower.pubs()]
            assert seen == sorted(set(seen))  # never back to the old epoch, never twice
        finally:
            anchor.stop()
            follower.stop()


def test_cascade_node_lease_fences_a_frozen_service(
    etcd_server: EtcdServer, tmp_path: Path
) -> None:
    url = fresh_url(etcd_server, "casc")
    root = f"sqlite://{tmp_path / 'root.db'}"
    commands.create_root("s1", root, "S")
    lease = cascade_lease("S", "s1")

    def serve(name: str) -> Proc:
        argv = [BATON, "cascade", "run", root, "--store", url, "--ttl", str(TTL)]
        return Proc(name, argv, tmp_path / f"{name}.log")

    def holder(proc: Proc) -> str:
        return f"{socket.gethostname()}:{proc.pid}"

    def served() -> beat.Beat | None:
        with open_node_db(root) as db:
            return beat.read(db)

    def ticks() -> int:
        with open_node_db(root) as db:
            last = db.last_tick()
        return last.tick_id if last is not None else 0

    first = serve("first")
    second: Proc | None = None
    try:
        old = wait_for(lambda: lease_in_store(url, lease), timeout=30, what="the node's lease")
        assert old.holder == holder(first)
        wait_for(lambda: (b := served()) and b.epoch == old.epoch, what="the first service")
        second = serve("second")
        wait_for(lambda: said(second, "campaigning"), timeout=30, what="the standby to campaign")
        first.pause()  # frozen: its lease runs out by etcd's clock, the standby takes over
        new = wait_for(
            lambda: (x := lease_in_store(url, lease)) and x.epoch > old.epoch and x,
            timeout=20,
            what="the standby to take the node's lease",
        )
        assert new.holder == holder(second)
        wait_for(lambda: (b := served()) and b.epoch == new.epoch, what="the new service's beat")
        first.resume()
        # Woken, the old service finds its lease gone and stops; nothing it does lands.
        wait_for(lambda: said(first, "LeaseLost"), timeout=20, what="the woken service to stop")
        assert first.running  # it stays, as a standby
        after = ticks()
        wait_for(lambda: ticks() > after, what="the new service to go on ticking")
        now = served()
        assert now is not None and (now.epoch, now.holder) == (new.epoch, holder(second))
        held = lease_in_store(url, lease)
        assert held is not None and (held.holder, held.epoch) == (new.holder, new.epoch)
    finally:
        first.stop()
        if second is not None:
            second.stop()
