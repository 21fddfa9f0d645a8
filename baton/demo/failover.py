"""The store-failover part of ``baton demo``: a Redis master switch that every client agrees to.

Two real ``redis-server`` processes (a master and its replica), two ``baton redis-failover
client`` processes (each keeping its own master file) and one ``baton redis-failover server``,
all started through the CLI with the test kit (:mod:`baton.testing.failover`). A worker INCRs a
counter through :func:`baton.failover.master_client`. The part then

1. SIGKILLs the master: the server runs a round (every client confirms the master is gone and
   empties its file), promotes the replica, and both files name it;
2. restarts the old master: the server's periodic reconfigure makes it a replica, never a
   second master;
3. switches back to it with ``baton redis-failover switch`` (planned): writes pause on the
   current master until the old one caught up, so every acknowledged INCR is on it.

An unplanned kill does not promise that no acknowledged write is lost (replication is
asynchronous: the dead master's unreplicated tail is gone), so the part shows the count it lost
there and checks "none lost" only for the planned switch, where baton does promise it.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis
from rich.console import Console

from baton.errors import BatonError
from baton.local.waiting import wait_for
from baton.logs import describe
from baton.store.master_file import Address
from baton.testing.failover import (
    ClientRole,
    IncrWorker,
    RedisGroup,
    ServerRole,
    baton_exe,
    failover_client,
    failover_server,
)

Step = Callable[[str, float, str, bool], Any]

#: The deadline of every wait: with the test kit's quick timings each takes a second or two.
WAIT = 20.0
#: Seconds between a worker's INCRs: about a thousand a second, load enough to show that
#: nothing acknowledged is lost, without taking a whole core of a small machine.
PACE = 0.001


def failover_part(console: Console, workdir: Path, step: Step) -> bool:
    """Run the store-failover walk-through in ``workdir``, reporting each step to ``step``
    (what, seconds, detail, ok); return True only when everything it shows happened. Every
    process it starts is stopped before it returns."""
    console.rule("[bold]store failover: a Redis master switch every client agrees to")
    workdir.mkdir(parents=True, exist_ok=True)
    group = RedisGroup(workdir / "redis", 2)
    roles: list[ClientRole | ServerRole] = []
    workers: list[IncrWorker] = []
    try:
        return _walk(
            console=console, workdir=workdir, group=group, roles=roles, workers=workers, step=step
        )
    except (BatonError, redis.RedisError, subprocess.TimeoutExpired) as exc:
        # A server that would not start or answer, or a condition that never came: one failed
        # step with the reason, not a traceback (what the demo promises a newcomer).
        step("store failover", 0.0, f"did not happen: {describe(exc)}", False)
        return False
    finally:
        for w in workers:
            w.stop()
        for role in roles:
            role.proc.stop()
        group.stop()


def _walk(
    *,
    console: Console,
    workdir: Path,
    group: RedisGroup,
    roles: list[ClientRole | ServerRole],
    workers: list[IncrWorker],
    step: Step,
) -> bool:
    t0 = time.monotonic()
    group.start()
    old, new = group.addresses
    clients = [failover_client(workdir, cid) for cid in ("a", "b")]
    roles += clients
    server = failover_server(workdir, group, clients, "s1")
    roles.append(server)

    def files_name(address: Address) -> bool:
        return all(c.master() == address for c in clients)

    wait_for(lambda: files_name(old), timeout=WAIT, what=f"both master files naming {old}")
    step("store failover: 2 Redis servers, 2 clients, 1 server", time.monotonic() - t0,
         f"master {old}, replica {new}; both master files name {old}", True)  # fmt: skip
    console.print(
        f"Redis master [green]{old}[/], replica {new}; clients a and b keep master files, "
        "one configuration server watches the master"
    )

    # 1. An unplanned switch: the master is SIGKILLed under a worker's INCRs.
    first = IncrWorker(clients[0].master_file, "demo:unplanned", pace=PACE)
    workers.append(first)
    first.start()
    wait_for(lambda: first.acked >= 100, timeout=WAIT, what="INCRs acknowledged by the master")
    console.print(f"a worker INCRs through client a's master file; SIGKILL the master {old}...")
    killed = time.monotonic()
    group.servers[0].kill()
    # The kill has returned, so the dead master acknowledges nothing more (an INCR answered
    # just before may still be counted a moment later: off by one at most).
    before_kill = first.acked
    wait_for(lambda: files_name(new), timeout=WAIT, what=f"both master files naming {new}")
    took = time.monotonic() - killed
    # The server logs the switch once its round is over, just after the clients' files moved.
    wait_for(lambda: server.switches() >= 1, timeout=WAIT, what="the server's round logged")
    good = server.switches() == 1 and group.masters() == [new]
    step("store failover: every client agreed", took,
         f"master {old} SIGKILLed; after every client confirmed, {new} was promoted and both "
         f"master files name it", good)  # fmt: skip
    console.print(f"both clients moved to [green]{new}[/] {took:.2f}s after the kill")
    wait_for(lambda: first.acked >= before_kill + 100, timeout=WAIT, what="INCRs on the new master")
    first.stop()
    with group.client(1) as r:
        held = int(r.get(first.key) or 0)
    after_kill = first.acked - before_kill
    # The new master holds its share of the dead one's writes plus every later one; what is
    # missing is the unreplicated tail, lost with the dead master (asynchronous replication).
    lost = max(0, first.acked - held)
    carried_on = after_kill > 0
    step("worker carried on at the new master", 0.0,
         f"{before_kill} INCRs acknowledged before the kill ({lost} of them lost with the dead "
         f"master's unreplicated tail: an unplanned kill does not promise none), {after_kill} "
         "after it",
         carried_on)  # fmt: skip
    good &= carried_on

    # 2. The old master returns, empty: the server's periodic reconfigure makes it a replica.
    back = time.monotonic()
    group.servers[0].start()
    wait_for(
        lambda: group.role(0) == "slave" and group.link_up(0),
        timeout=WAIT,
        what=f"{old} replicating {new}",
    )
    replica = group.masters() == [new]
    step("old master returned as a replica", time.monotonic() - back,
         f"{old} restarted; the server made it a replica of {new}, never a second master",
         replica)  # fmt: skip
    console.print(f"{old} restarted and the server made it a replica of {new}")
    good &= replica

    # 3. A planned switch back under load: every acknowledged INCR must be on the new master.
    second = IncrWorker(clients[1].master_file, "demo:planned", pace=PACE)
    workers.append(second)
    second.start()
    wait_for(lambda: second.acked >= 100, timeout=WAIT, what=f"INCRs acknowledged by {new}")
    console.print(f"a worker INCRs through client b's master file; planned switch back to {old}...")
    before = second.acked
    started = time.monotonic()
    res = subprocess.run(
        [
            baton_exe(), "redis-failover", "switch", str(old), "--redis-servers", group.spec,
            "--client-ids", ",".join(c.spec for c in clients), "--timeout", "10",
        ],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    took = time.monotonic() - started
    if res.returncode != 0:
        step("planned switch back", took, f"failed: {res.stderr.strip()}", False)
        return False
    wait_for(lambda: files_name(old), timeout=WAIT, what=f"both master files naming {old}")
    wait_for(lambda: second.acked >= before + 100, timeout=WAIT, what=f"INCRs on {old}")
    second.stop()
    # The running server adopts the switch at its next periodic reconfigure.
    wait_for(
        lambda: (server.status() or {}).get("master") == str(old),
        timeout=WAIT,
        what="the running server following the switch",
    )
    with group.client(0) as r:
        held = int(r.get(second.key) or 0)
    none_lost = held >= second.acked and group.masters() == [old]
    step("planned switch back: 0 acknowledged writes lost", took,
         f"`baton redis-failover switch {old}`: {before} INCRs acknowledged before, "
         f"{second.acked - before} during and after; {old} holds {held} >= {second.acked}",
         none_lost)  # fmt: skip
    console.print(
        f"switched back to [green]{old}[/] in {took:.2f}s; it holds {held} INCRs, "
        f"{second.acked} were acknowledged: none lost"
    )
    return good and none_lost
