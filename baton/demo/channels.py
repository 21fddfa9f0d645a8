"""The live-channel part of ``baton demo``: subscribers at every node of a local cluster share
one upstream; its leader is SIGKILLed and the survivors' subscribers move to a new epoch."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from rich.console import Console

from baton.local.cluster import LocalCluster
from baton.local.waiting import wait_for
from baton.testing.channels import Subscriber, channel_leaders

CHANNEL = "tick:demo,every=0.1"


def channels_part(
    console: Console, cluster: LocalCluster, step: Callable[[str, float, str, bool], Any]
) -> bool:
    """Subscribe at every node, kill the upstream's node, watch the others carry on."""
    console.rule("[bold]live channels: one upstream per channel")
    t0 = time.monotonic()
    subs = {
        n: Subscriber([node.url], cluster.token, CHANNEL).start()
        for n, node in cluster.nodes.items()
    }
    try:
        wait_for(lambda: all(s.pubs() for s in subs.values()), timeout=30, what="publications")
        ((leader, epoch),) = wait_for(
            lambda: channel_leaders(cluster, CHANNEL), timeout=10, what="one upstream"
        )
        step(
            "channel: one upstream for 3 nodes' subscribers",
            time.monotonic() - t0,
            f"{CHANNEL} led by {leader} at epoch {epoch}",
            len(channel_leaders(cluster, CHANNEL)) == 1,
        )
        console.print(f"{CHANNEL}: subscribers at every node, upstream on [green]{leader}[/]")
        console.print(f"SIGKILL {leader}...")
        killed = time.monotonic()
        cluster.kill(leader)
        survivors = [n for n in subs if n != leader]
        wait_for(
            lambda: all(subs[n].pubs() and subs[n].epoch() > epoch for n in survivors),
            timeout=4 * cluster.ttl + 10,
            what="the survivors' subscribers on a new epoch",
        )
        took = time.monotonic() - killed
        ((new, new_epoch),) = wait_for(
            lambda: channel_leaders(cluster, CHANNEL), timeout=10, what="one upstream"
        )
        seen = [[(m.epoch, m.offset) for m in subs[n].pubs()] for n in survivors]
        in_order = all(s == sorted(set(s)) for s in seen)
        step(
            "channel: new leader after SIGKILL",
            took,
            f"{new} leads at epoch {new_epoch}; subscribers never saw an offset twice",
            new != leader and in_order,
        )
        console.print(f"[green]{new}[/] runs the upstream at epoch {new_epoch} after {took:.2f}s")
        return new != leader and in_order
    finally:
        for sub in subs.values():
            sub.stop()
