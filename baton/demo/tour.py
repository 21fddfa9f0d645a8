"""``baton demo``: the main job on the embedded default (an SQLite store).

Several ``baton elect`` supervisors campaign for one lease; the leader's COMMAND writes to a
fenced log with its epoch. The demo then

1. SIGKILLs the leader's supervisor: its guard stops COMMAND at once, the lease expires at the
   store after the ttl, and another node takes over;
2. SIGSTOPs the new leader's supervisor (a frozen process, as in a long GC or VM pause): its
   guard stops COMMAND at the renew deadline although the supervisor cannot run, another node
   takes over after the ttl, and when the frozen one is resumed it notices and exits;
3. stops everyone cleanly, and checks the fenced log: epochs only went up, every takeover had a
   higher epoch, and no deposed leader wrote after its successor started;
4. starts three node agents (``baton node``), shows the elected controller, SIGKILLs it and
   shows the new controller and the measured takeover;
5. restarts it, creates 12 replicated objects (the built-in ``counter`` workload), shows them
   spread over the nodes, SIGKILLs a node, and shows its members moved (no more than it held)
   and the groups it led transferred to the member with the highest commit index; then stops
   every node cleanly;
6. replicates a generated workload root -> branch -> leaf with Spark workers, kills the root
   mid-stream, fails over to the branch, checks the leaf equals the surviving data, and
   resurrects the old root (saving the events that never left it);
7. runs two Redis servers (a master and its replica) with two ``baton redis-failover`` clients
   and a server, SIGKILLs the master and shows every client's master file moving to the replica
   only after all of them agreed, then switches back with a planned switch that loses no
   acknowledged write;
8. starts a node agent and prints the address of its web dashboard, which shows the sets the
   demo built (kept up until Enter when stdin is a terminal).

It prints what happened and how long each step took, and exits 0 only when every check held.
"""

from __future__ import annotations

import os
import signal
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.table import Table

from baton.demo.cascade import cascade_part
from baton.demo.channels import channels_part
from baton.demo.dashboard import dashboard_part
from baton.demo.failover import failover_part
from baton.demo.placement import placement_part
from baton.lease.timings import Timings
from baton.local.cluster import LocalCluster
from baton.local.processes import Proc
from baton.local.waiting import WaitTimeout, wait_for
from baton.logs import describe
from baton.node.status import Liveness
from baton.testing.fenced import Entry, FencedLog
from baton.testing.processes import elect_proc, first_above, last_of, latest


@dataclass
class Step:
    what: str
    seconds: float
    detail: str
    ok: bool


def _leader(log: FencedLog, procs: list[Proc], timeout: float) -> tuple[Entry, Proc]:
    entry = wait_for(lambda: latest(log), timeout=timeout, what="a leader writing")
    return entry, next(p for p in procs if p.name == entry.writer)


def _cluster_part(console: Console, workdir: Path, ttl: float, steps: list[Step]) -> bool:
    """Three node agents: the controller is elected, SIGKILLed, replaced; then a clean stop."""
    console.rule("[bold]node agents: controller election")
    with LocalCluster(3, data_dir=workdir, ttl=ttl) as cluster:
        t0 = time.monotonic()
        first, epoch = cluster.wait_for(cluster.controller)
        cluster.wait_for(lambda: list(cluster.states().values()) == [Liveness.LIVE] * 3)
        steps.append(
            Step("3 nodes up, controller elected", time.monotonic() - t0,
                 f"{first} is controller at epoch {epoch}", True)
        )  # fmt: skip
        console.print(f"[green]{first}[/] is controller at epoch {epoch}; SIGKILL it...")
        killed = time.monotonic()
        cluster.kill(first)

        def newer() -> tuple[str, int] | None:
            ctl = cluster.controller()
            return ctl if ctl and ctl[1] > epoch else None

        second, epoch2 = cluster.wait_for(newer, timeout=ttl + 10)
        took = time.monotonic() - killed
        good = second != first and took < ttl + 1.5
        steps.append(
            Step("controller takeover after SIGKILL", took,
                 f"{second} is controller at epoch {epoch2} > {epoch}", good)
        )  # fmt: skip
        console.print(f"[green]{second}[/] took over in {took:.2f}s")

        def lapsed() -> str | None:
            state = cluster.states().get(first)
            return state if state in (Liveness.SUSPECT, Liveness.DEAD) else None

        state = cluster.wait_for(lapsed)
        steps.append(Step("killed node reported", 0.0, f"the others report {first} {state}", True))
        cluster.restart(first)
        cluster.wait_for(lambda: list(cluster.states().values()) == [Liveness.LIVE] * 3, timeout=30)

        def step(what: str, seconds: float, detail: str, ok: bool) -> None:
            steps.append(Step(what, seconds, detail, ok))

        good &= channels_part(console, cluster, step)
        for node in cluster.nodes:
            if not cluster.node(node).running:
                cluster.restart(node)
        cluster.wait_for(lambda: list(cluster.states().values()) == [Liveness.LIVE] * 3, timeout=30)
        # The channel's leader may have been the controller: ask again.
        current, _ = cluster.wait_for(cluster.controller)
        good &= placement_part(console, cluster, current, step)
    return good


def _on_a_cluster(
    console: Console, tmp: Path, step: Callable[[str, float, str, bool], None]
) -> bool:
    """The cascade part on a standalone Spark cluster started here: a master and two workers
    of two cores (four task slots, as the local demo has), stopped afterwards."""
    from baton.testing.spark_servers import StandaloneCluster

    console.rule("[bold]a standalone Spark cluster: a master and two workers")
    t0 = time.monotonic()
    with console.status("starting the Spark master and two workers..."):
        cluster = StandaloneCluster(tmp / "spark-cluster", workers=2, cores=2).start()
    try:
        step("standalone Spark cluster", time.monotonic() - t0,
             f"{cluster.url}, 2 workers x 2 cores (logs in {cluster.work})", True)  # fmt: skip
        return cascade_part(console, tmp / "cascade", step, master=cluster.url)
    finally:
        cluster.stop()


def run_demo(
    nodes: int = 3,
    ttl: float = 2.0,
    workdir: Path | None = None,
    spark: str = "local",
    keep: bool | None = None,
) -> bool:
    """Run the demonstration; return True when everything it shows actually happened.
    ``spark``: ``local`` (the cascade part on ``local[4]``) or ``cluster`` (on a standalone
    cluster of two workers started for it). ``keep``: hold the dashboard's agent up at the end
    (until Enter, or Ctrl-C without a terminal); None: when stdin is a terminal, or when
    ``BATON_DEMO_KEEP=1``."""
    if keep is None and os.environ.get("BATON_DEMO_KEEP") == "1":
        keep = True
    console = Console(stderr=False)
    timings = Timings.for_ttl(ttl)
    tmp = Path(workdir or tempfile.mkdtemp(prefix="baton-demo-"))
    url = f"sqlite://{tmp / 'store.db'}"
    log_path = tmp / "fenced.db"
    log = FencedLog(log_path)
    steps: list[Step] = []
    console.rule("[bold]baton demo: fenced leader election on SQLite")
    console.print(f"store {url}\nttl {ttl:g}s, renew deadline {timings.renew_deadline:g}s")
    procs: list[Proc] = []
    ok = True
    try:
        t0 = time.monotonic()
        for i in range(nodes):
            procs.append(elect_proc(tmp, url, f"node-{i + 1}", log_path, ttl))
        console.print(f"started {nodes} 'baton elect' supervisors; waiting for a leader...")
        first, leader = _leader(log, procs, timeout=30)
        steps.append(
            Step("first election", first.at - t0, f"{leader.name} leads, epoch {first.epoch}", True)
        )
        console.print(f"[green]{leader.name}[/] leads at epoch {first.epoch}")

        # 1. SIGKILL the leader's supervisor.
        console.print(f"SIGKILL {leader.name}'s supervisor...")
        killed_at = time.monotonic()
        leader.kill()
        new = wait_for(lambda: first_above(log, first.epoch), timeout=ttl + 10)
        took = new.at - killed_at
        good = new.writer != leader.name and took < ttl + timings.election_timeout_max + 1.5
        steps.append(
            Step(
                "takeover after SIGKILL",
                took,
                f"{new.writer} leads, epoch {new.epoch} > {first.epoch}",
                good,
            )
        )
        console.print(f"[green]{new.writer}[/] took over in {took:.2f}s (ttl {ttl:g}s)")
        ok &= good

        # 2. SIGSTOP the new leader's supervisor.
        paused = next(p for p in procs if p.name == new.writer)
        console.print(f"SIGSTOP {paused.name}'s supervisor (frozen, as in a long pause)...")
        paused_at = time.monotonic()
        paused.signal(signal.SIGSTOP)
        third = wait_for(lambda: first_above(log, new.epoch), timeout=ttl + 10)
        old_last = last_of(log, new.epoch)
        assert old_last is not None
        gap = third.at - old_last.at
        good = old_last.at < third.at and third.writer != paused.name
        steps.append(
            Step(
                "takeover after SIGSTOP",
                third.at - paused_at,
                f"{third.writer} leads, epoch {third.epoch}; the frozen leader's work stopped "
                f"{gap:.2f}s before",
                good,
            )
        )
        console.print(
            f"[green]{third.writer}[/] took over in {third.at - paused_at:.2f}s; the frozen "
            f"leader's COMMAND had stopped {gap:.2f}s earlier (its guard enforced the deadline)"
        )
        ok &= good
        resumed_at = time.monotonic()
        paused.signal(signal.SIGCONT)
        wait_for(
            lambda: paused.popen.poll() is not None, timeout=15, what="the resumed one to exit"
        )
        code = paused.popen.returncode
        good = code == 75
        steps.append(
            Step(
                "resumed old leader steps down",
                time.monotonic() - resumed_at,
                f"{paused.name} exited with status {code} (75: leadership lost)",
                good,
            )
        )
        ok &= good

        # 3. Stop everyone and check the fenced log.
        for p in procs:
            p.stop()
        log.check()
        entries = log.entries()
        epochs = sorted({e.epoch for e in entries})
        late = [e for e in entries if e.epoch == new.epoch and e.at > third.at]
        refused = log.refused()
        good = not late and epochs == sorted(epochs) and len(epochs) >= 3
        steps.append(
            Step(
                "fenced log verified",
                0.0,
                f"{len(entries)} writes under {len(epochs)} epochs, each epoch higher than the "
                f"last; {len(refused)} stale writes refused; 0 writes after a successor started",
                good,
            )
        )
        ok &= good
        ok &= _cluster_part(console, tmp / "cluster", ttl, steps)

        def step(what: str, seconds: float, detail: str, good: bool) -> None:
            steps.append(Step(what, seconds, detail, good))

        if spark == "cluster":
            ok &= _on_a_cluster(console, tmp, step)
        else:
            ok &= cascade_part(console, tmp / "cascade", step)
        ok &= failover_part(console, tmp / "failover", step)
    except (WaitTimeout, AssertionError) as exc:
        steps.append(Step("demo step", 0.0, f"did not happen: {describe(exc)}", False))
        ok = False
    finally:
        for p in procs:
            p.stop()
    table = Table(title="what happened")
    for col in ("step", "time", "detail", "ok"):
        table.add_column(col)
    for s in steps:
        table.add_row(
            s.what, f"{s.seconds:.2f}s", s.detail, "[green]yes[/]" if s.ok else "[red]NO[/]"
        )
    console.print(table)
    console.print(f"work directory: {tmp}")
    ok &= dashboard_part(console, tmp / "dashboard", tmp / "cascade", keep)
    return ok
