"""A fault campaign: start the cluster, run rounds of random faults under steady work, let the
cluster settle after each round, then check the history.

A round injects faults one after another (at most two at once) until it has injected its share,
repairs what is still broken and measures how long the cluster takes to settle: one controller
seen by every agent, every placed group led, every elected job writing again, every host's
channel subscriber receiving publications, and a row written at the root visible at the leaf
within 2 s. The report (``report.json`` in the run's
directory) holds the faults by kind, the violations and the settle times; a failed run keeps its
directory and says how to repeat it.
"""

from __future__ import annotations

import json
import os
import random
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from baton.cascade.root import RootState
from baton.chaos import checker
from baton.chaos.cluster import (
    CASCADE,
    CASCADE_SET,
    COUNTERS,
    LEASES,
    STORES,
    ChaosCluster,
    probe_lag,
)
from baton.chaos.disk import node_db
from baton.chaos.history import History
from baton.chaos.listener import Listeners, stop
from baton.chaos.nemesis import LOSS_FAULT, Fault, LossKind, Nemesis
from baton.errors import WaitTimeout
from baton.local.processes import Proc
from baton.local.waiting import wait_for

#: Seconds a round may take to settle before it counts as a violation. A liveness bound, not
#: a speed target: on 2 cores at load 9-13 (five agents, up to three Spark JVMs, the store's
#: failover roles) a round that moved every cascade worker took up to 88 s; a cluster that is
#: stuck never settles.
SETTLE_BOUND = 120.0
#: The lag a settled cascade shows, seconds.
SETTLED_LAG = 2.0


@dataclass(frozen=True, slots=True)
class Plan:
    """What to run: ``faults`` in all (or rounds until ``duration`` seconds have passed)."""

    seed: int
    faults: int | None = None
    duration: float | None = None
    per_round: int = 6
    ttl: float = 2.0
    #: Only these kinds of fault (every kind when empty): to aim a run at one fault.
    kinds: tuple[str, ...] = ()
    #: The store is a Redis master and replica under store failover (else one Redis server).
    failover: bool = True
    #: Lose the cascade's root once, halfway through (see :func:`lose_root`).
    root_loss: bool = True
    #: The root's loss is failed over by the node agents' automatic failover (else by
    #: ``baton cascade failover``, as an operator would).
    auto_failover: bool = True
    #: Synchronous mode: ``baton cascade sync SET K`` before the writer starts, which then
    #: writes through the sync-mode helper (0: asynchronous).
    sync: int = 0

    def root_loss_due(self, rounds: int, elapsed: float) -> bool:
        """Whether the root is lost after round ``rounds`` (``elapsed`` seconds in)."""
        if not self.root_loss:
            return False
        if self.faults is not None:
            total = -(-self.faults // self.per_round)
            return rounds >= max(1, total // 2)
        return elapsed >= (self.duration or 0) / 2


class Observer(threading.Thread):
    """Records, every half second, who each agent says leads: the controller and each group."""

    def __init__(self, cluster: ChaosCluster) -> None:
        super().__init__(daemon=True, name="chaos-observer")
        self.cluster = cluster
        self.history = History(cluster.history_dir, "observer")
        self.halt = threading.Event()

    def run(self) -> None:
        beats = 0
        try:
            while not self.halt.wait(0.5):
                beats += 1
                if beats % 10 == 1:
                    # The machine's load: long settle times on a starved machine are not bugs.
                    self.history.record("observe-load", load=os.getloadavg())
                if self.cluster.failover:
                    # Two reads that agree: a snapshot no switch ran through (a switch takes far
                    # longer than reading five small files twice).
                    first, second = self.cluster.master_files(), self.cluster.master_files()
                    if first == second:
                        self.history.record("observe-master-files", files=first)
                for host, view in self.cluster.views("/v1/status").items():
                    ctl = view.get("controller") or {}
                    self.history.record(
                        "observe-controller", host=host, id=ctl.get("id"), epoch=ctl.get("epoch")
                    )
                for host, view in self.cluster.views("/v1/placement").items():
                    for g in view.get("groups", []):
                        self.history.record(
                            "observe-group",
                            host=host,
                            group=g["group"],
                            leader=g.get("leader"),
                            term=g.get("term"),
                        )
        finally:
            self.history.close()


def _last_writes(resource: Path) -> dict[str, int]:
    db = sqlite3.connect(f"file:{resource}?mode=ro", uri=True, timeout=30)
    try:
        return dict(db.execute("SELECT lease, max(seq) FROM writes GROUP BY lease").fetchall())
    finally:
        db.close()


def _controller(cluster: ChaosCluster) -> str | None:
    """The controller every agent names (None while they disagree or one does not answer)."""
    views = cluster.views("/v1/status")
    ids = {(v.get("controller") or {}).get("id") for v in views.values()}
    if len(views) != len(cluster.hosts) or len(ids) != 1:
        return None
    return next(iter(ids))


def _placed(cluster: ChaosCluster) -> bool:
    host = _controller(cluster)
    if host is None:
        return False
    try:
        groups = cluster.api(host, "/v1/placement")["groups"]
    except (httpx.HTTPError, ValueError, KeyError):
        return False
    return len(groups) == 2 * len(COUNTERS) + len(CASCADE) and all(
        g["state"] == "ok" for g in groups
    )


def settle(cluster: ChaosCluster, listeners: Listeners, bound: float) -> tuple[float | None, str]:
    """Seconds until the cluster is settled (see the module docstring), None past ``bound``;
    and what it waited for last (kept in the history, to say why a round did not settle)."""
    start = time.monotonic()
    before = _last_writes(cluster.resource)
    waiting = ["nothing"]

    def settled() -> bool:
        if cluster.failover and not _one_store_master(cluster):
            waiting[0] = "every master file naming the one store master, the other its replica"
            return False
        if not _placed(cluster):
            waiting[0] = "one controller and every group placed"
            return False
        now = _last_writes(cluster.resource)
        stalled = [lease for lease in LEASES if now.get(lease, 0) <= before.get(lease, 0)]
        if stalled:
            waiting[0] = f"fresh writes of {stalled}"
            return False
        silent = listeners.fresh(SETTLED_LAG)
        if silent:
            waiting[0] = f"publications at the subscribers of {silent}"
            return False
        lag = probe_lag(cluster, SETTLED_LAG)
        if lag is None:
            waiting[0] = f"the leaf within {SETTLED_LAG} s of the root"
            return False
        return True

    try:
        wait_for(settled, timeout=bound, interval=0.5, what="the cluster to settle")
    except WaitTimeout:
        return None, waiting[0]
    return time.monotonic() - start, waiting[0]


def _one_store_master(cluster: ChaosCluster) -> bool:
    master = cluster.store_master()
    if master is None:
        return False
    port = int(master.rsplit(":", 1)[1])
    roles = {name: cluster.store_role(name) for name in cluster.stores}
    return all((role == "master") == (STORES[name] == port) for name, role in roles.items())


class Supervisor(threading.Thread):
    """Restarts an election candidate that ended by itself, as systemd's ``Restart=`` or a
    Kubernetes Deployment would: ``baton elect`` exits (status 75) when it loses leadership, and
    is documented to be run again to campaign again. Without this, a long run lost one
    candidate after another until a job had none left (seed 20261126, round 10). A candidate
    killed by the nemesis (a signal) is left down: the fault's repair starts it."""

    #: Seconds between a candidate's exit and its restart (systemd's ``RestartSec``).
    DELAY = 1.0

    def __init__(self, services: dict[str, Proc], history_dir: Path) -> None:
        super().__init__(daemon=True, name="chaos-supervisor")
        self.services = services
        # A file of its own: History is written by one thread.
        self.history = History(history_dir, "supervisor")
        self.halt = threading.Event()
        self._ended: dict[str, float] = {}

    def run(self) -> None:
        while not self.halt.wait(0.25):
            now = time.monotonic()
            for name, svc in list(self.services.items()):
                status = svc.poll()
                if not name.startswith("elect-") or status is None or status < 0:
                    self._ended.pop(name, None)
                    continue
                ended = self._ended.setdefault(name, now)
                if now - ended >= self.DELAY:
                    self.history.record("supervisor-restart", name=name, status=status)
                    svc.start()
                    self._ended.pop(name, None)


#: Writes the application makes at the old root after its service stopped: the events that
#: never leave it (about 1 s at the writer's pace).
STRANDED_WRITES = 40
#: Writes at the new root before the old one comes back.
WRITES_BEFORE_RESURRECT = 100


def _root_named(cluster: ChaosCluster, via: str) -> str | None:
    """The writable root ``baton cascade root`` names through ``via`` (None: none now)."""
    try:
        found = json.loads(cluster.cli("cascade", "root", CASCADE_SET, "--via", via, "--json"))
    except RuntimeError:
        return None  # exit 1: no live root (a failover is due or under way)
    return str(found["root"]) if found.get("state") == RootState.WRITABLE else None


def lose_root(cluster: ChaosCluster, harness: History, auto: bool = True) -> float | None:
    """The root is lost, as an operator lives it: its service stops for good (its object is
    deleted) while the application goes on committing there, so that events are stranded on
    it. ``auto``: the set's automatic failover is on, and the node agents' actor promotes a
    branch once the members agree the root is gone; else the application is held and
    ``baton cascade failover`` promotes one. The application is pointed at the new root (as
    ``baton cascade root`` names it); then the old root comes back and ``baton cascade
    resurrect`` saves its stranded events to ``stranded.jsonl`` and makes it a branch, and its
    object is declared again (a subscriber now: placed where Spark runs). Every step goes
    through the CLI; the checker then holds the run to: every acknowledged write is in the set
    or in the saved file, never both, never twice. Returns, when ``auto``, the seconds from the
    root's service stopping to ``baton cascade root`` naming the new root."""
    writer = cluster.writer
    assert writer is not None
    old = cluster.root
    via = cluster.location(cluster.subscribers()[0])
    harness.record("root-loss", root=old, step="start", auto=auto)
    if auto:
        # On for the loss only: in the rounds, two faults at once may take both of the root's
        # hosts, which this harness does not follow (its writer would stay at the old root).
        cluster.cli("cascade", "auto-failover", CASCADE_SET, "on", "--via", via)
    cluster.cli("object", "delete", old)

    def stopped() -> bool:
        views = cluster.views("/v1/placement")
        return len(views) == len(cluster.hosts) and not any(
            g["group"] == f"{old}/0" for v in views.values() for g in v.get("groups", [])
        )

    wait_for(stopped, timeout=60, interval=0.5, what=f"{old}'s service stopped")
    since = time.monotonic()
    acked = writer.acked
    wait_for(lambda: writer.acked >= acked + STRANDED_WRITES, timeout=60, what="writes at the root")
    if auto:
        # The application goes on writing at the old root until the set names another.
        named = wait_for(
            lambda: (n := _root_named(cluster, via)) not in (None, old) and n,
            timeout=SETTLE_BOUND,
            interval=0.2,
            what="the automatic failover",
        )
        seconds = round(time.monotonic() - since, 2)
        writer.hold()
        harness.record("root-loss", root=old, step="lost", acked=writer.acked)
        new = str(named)
        out = json.dumps({"new_root": new, "auto": True, "seconds_after_stop": seconds})
        cluster.cli("cascade", "auto-failover", CASCADE_SET, "off", "--via", cluster.location(new))
    else:
        writer.hold()
        harness.record("root-loss", root=old, step="lost", acked=writer.acked)
        out = cluster.cli("cascade", "failover", old, "--via", via, "--json")
        new = str(json.loads(out)["new_root"])
        seconds = None
    cluster.root = new
    harness.record("root-loss", root=new, step="failover", old=old, output=out)
    writer.move_to(node_db(cluster.dir, new))
    acked = writer.acked
    wait_for(
        lambda: writer.acked >= acked + WRITES_BEFORE_RESURRECT,
        timeout=120,
        what=f"writes at the new root {new}",
    )
    saved = cluster.dir / checker.STRANDED_FILE
    out = cluster.cli(
        "cascade", "resurrect", old, "--via", cluster.location(new), "--save", str(saved)
    )
    harness.record("root-loss", root=new, step="resurrect", old=old, output=out)
    cluster.declare_objects()
    return seconds


class RootLoss:
    """The cascade's root lost with its host, as a fault (issue 30, step 5): the host that
    serves the root (:meth:`ChaosCluster.root_host`, the root's one replica) has its agent
    SIGKILLed or SIGSTOPped, or is cut off from every other host and the store, while the
    application goes on committing at the root (the events stranded there). Nobody runs a
    failover: the set's automatic failover is on while the fault lasts, and the node agents
    promote a branch once the members agree the root is gone. The harness only follows, as an
    application would: once ``baton cascade root`` names another root it holds the writer, the
    old root's object is deleted (an operator retires the dead root before its host comes
    back), the host is repaired (restarted, SIGCONT, healed) and the writer moved to the new
    root. :meth:`finish` then lets writes go on there and brings the old root back through
    ``baton cascade resurrect``, which saves its stranded events.

    The nemesis draws it (a kill-agent, pause-agent or isolate that picks the root's host
    becomes this fault); a run whose random faults never did is given one halfway
    (:meth:`now`). One loss per run: the new root is placed with a standby, so no single host
    serves it. The fault holds the store, the network and the branch's disk, so that no store,
    partition or full-disk fault runs beside it (the failover needs the store and the branch;
    the harness's CLI calls need the store)."""

    def __init__(self, cluster: ChaosCluster, harness: History) -> None:
        self.cluster = cluster
        self.harness = harness
        #: (old root, new root) of a loss whose old root is still to be resurrected.
        self.pending: tuple[str, str] | None = None
        self.started = False

    def fault(self, kind: LossKind, host: str, by: str = "nemesis") -> Fault | None:
        """The root's loss by ``kind`` when ``host`` serves the root (see the class); ``by``:
        who drew it, for the report."""
        if self.started or host != self.cluster.root_host():
            return None
        name = f"agent-{host}"
        svc = self.cluster.services[name]
        net = self.cluster.net
        hit = {LossKind.KILL: svc.kill, LossKind.FREEZE: svc.pause}.get(kind)
        back = {LossKind.KILL: svc.start, LossKind.FREEZE: svc.resume}.get(kind, net.heal)
        since = [0.0]

        def start() -> None:
            self.started = True
            self._auto_failover(True)
            self.harness.record(
                "root-loss",
                root=self.cluster.root, step="start", auto=True, how=kind, host=host, by=by,
            )  # fmt: skip
            since[0] = time.monotonic()
            if hit is None:
                net.isolate(host)  # from the store's host too
            else:
                hit()

        def repair() -> None:
            self._follow(kind, host, since[0], back)

        # Repaired at the round's next step: the repair waits for the failover, however long.
        return Fault(
            LOSS_FAULT[kind], host, 0.0, start, repair, frozenset({name, "store", "net", "disk"})
        )

    def now(self, kind: LossKind) -> None:
        """The root's loss by ``kind``, outside the rounds (the run's guarantee of one)."""
        host = self.cluster.root_host()
        assert host is not None
        fault = self.fault(kind, host, by="halfway")
        assert fault is not None
        fault.start()
        fault.repair()

    def _via(self) -> str:
        return self.cluster.location(self.cluster.subscribers()[0])

    def _cli(self, *args: str) -> None:
        """``baton ARGS``, retried for up to a minute (a store switch may be under way)."""

        def done() -> bool:
            try:
                self.cluster.cli(*args)
            except (RuntimeError, subprocess.TimeoutExpired):
                return False
            return True

        wait_for(done, timeout=60, interval=1.0, what=f"baton {' '.join(args[:3])}")

    def _auto_failover(self, on: bool) -> None:
        """The set's switch, through the CLI."""
        self._cli(
            "cascade", "auto-failover", CASCADE_SET, "on" if on else "off", "--via", self._via()
        )

    def _follow(self, kind: LossKind, host: str, since: float, back: Callable[[], object]) -> None:
        cluster, writer = self.cluster, self.cluster.writer
        assert writer is not None
        old = cluster.root
        via = self._via()
        try:
            named = wait_for(
                lambda: (n := _root_named(cluster, via)) not in (None, old) and n,
                timeout=SETTLE_BOUND,
                interval=0.2,
                what="the automatic failover",
            )
        except WaitTimeout:
            # No failover: the checker reports it (a start with no failover); the host comes
            # back and the run goes on with the old root.
            self.harness.record("root-loss", root=old, step="no-failover", how=kind)
            back()
            self._auto_failover(False)
            return
        seconds = round(time.monotonic() - since, 2)
        writer.hold()
        new = str(named)
        self.harness.record(
            "root-loss", root=old, step="lost", acked=writer.acked, how=kind, seconds=seconds
        )
        # The old root is retired before its host returns: its agent must not serve it again.
        self._auto_failover(False)
        self._cli("object", "delete", old)
        back()
        cluster.root = new
        out = json.dumps({"new_root": new, "auto": True, "kind": kind, "seconds": seconds})
        self.harness.record("root-loss", root=new, step="failover", old=old, output=out)
        writer.move_to(node_db(cluster.dir, new))
        self.pending = (old, new)

    def finish(self) -> None:
        """After a loss: writes at the new root, then the old root resurrected as a branch and
        its object declared again (a subscriber now)."""
        if self.pending is None:
            return
        old, new = self.pending
        self.pending = None
        writer = self.cluster.writer
        assert writer is not None
        # Sync mode: the new root has no branch until the old one is resurrected, so its
        # commits wait for their timeout, unconfirmed: a few then.
        want = WRITES_BEFORE_RESURRECT if writer.sync <= 0 else 2
        done = writer.committed
        wait_for(
            lambda: writer.committed >= done + want,
            timeout=120,
            what=f"writes at the new root {new}",
        )
        saved = self.cluster.dir / checker.STRANDED_FILE
        out = self.cluster.cli(
            "cascade", "resurrect", old, "--via", self.cluster.location(new), "--save", str(saved)
        )
        self.harness.record("root-loss", root=new, step="resurrect", old=old, output=out)
        self.cluster.declare_objects()


def _round(nemesis: Nemesis, rng: random.Random, count: int) -> None:
    active: list[Fault] = []
    injected = 0
    while injected < count or active:
        now = time.monotonic()
        for fault in [f for f in active if f.ends <= now]:
            nemesis.repair(fault)
            active.remove(fault)
        if injected < count and len(active) < 2:
            busy = set().union(*(f.busy for f in active)) if active else set()
            new = nemesis.inject(now, busy)
            if new is not None:
                injected += 1
                active.append(new)
            time.sleep(rng.uniform(0.3, 1.5))
        else:
            time.sleep(0.1)


def run(directory: Path, plan: Plan, log: Any = print) -> dict[str, Any]:
    """Run ``plan`` in ``directory`` (made empty first is the caller's job) and check it."""
    rng = random.Random(plan.seed)
    started = time.monotonic()
    cluster = ChaosCluster(directory, ttl=plan.ttl, failover=plan.failover)
    harness = History(cluster.history_dir, "campaign")
    observer = Observer(cluster)
    supervisor = Supervisor(cluster.services, cluster.history_dir)
    listeners: Listeners | None = None
    try:
        cluster.start()
        wait_for(lambda: _controller(cluster), timeout=90, what="a controller")
        cluster.create_objects()
        wait_for(lambda: _placed(cluster), timeout=180, what="every object placed")
        # The cascade is in sync before the writer starts, so no initial copy races it.
        wait_for(
            lambda: probe_lag(cluster, 10) is not None, timeout=300, what="the cascade in sync"
        )
        listeners = Listeners(cluster)
        listeners.start()
        wait_for(lambda: not listeners.fresh(SETTLED_LAG), timeout=60, what="the channel live")
        log(f"chaos: cluster up in {directory}")
        if plan.sync:
            cluster.cli(
                "cascade", "sync", CASCADE_SET, str(plan.sync), "--via", cluster.location("s1")
            )
            harness.record("campaign-sync", k=plan.sync)
        cluster.start_writer(plan.seed, plan.sync)
        observer.start()
        supervisor.start()
        auto = plan.root_loss and plan.auto_failover
        loss = RootLoss(cluster, harness)
        nemesis = Nemesis(cluster, rng, harness, plan.kinds, loss.fault if auto else None)
        started = time.monotonic()
        rounds = 0
        lost = False
        while True:
            if plan.faults is not None and nemesis.count >= plan.faults:
                break
            if plan.duration is not None and time.monotonic() - started >= plan.duration:
                break
            rounds += 1
            share = plan.per_round
            if plan.faults is not None:
                share = min(share, plan.faults - nemesis.count)
            _round(nemesis, rng, share)
            # A root lost in the round comes back (resurrect) before the cluster can settle.
            loss.finish()
            lost = lost or loss.started
            seconds, waited = settle(cluster, listeners, SETTLE_BOUND)
            harness.record(
                "settle", round=rounds, seconds=seconds, bound=SETTLE_BOUND, waited_for=waited
            )
            log(
                f"chaos: round {rounds}: {nemesis.count} faults so far, settled in "
                + (f"never (waiting for {waited})" if seconds is None else f"{seconds:.1f} s")
            )
            if seconds is None:
                break
            if not lost and plan.root_loss_due(rounds, time.monotonic() - started):
                lost = True
                if auto:
                    # The random faults never hit the root's host: lost here, in a random way.
                    loss.now(rng.choice(list(LossKind)))
                    loss.finish()
                else:
                    lose_root(cluster, harness, auto=False)
                seconds, waited = settle(cluster, listeners, SETTLE_BOUND)
                harness.record(
                    "settle", round=f"{rounds} (root lost)", seconds=seconds,
                    bound=SETTLE_BOUND, waited_for=waited,
                )  # fmt: skip
                log(
                    f"chaos: root lost after round {rounds}, now {cluster.root}: settled in "
                    + (f"never (waiting for {waited})" if seconds is None else f"{seconds:.1f} s")
                )
                if seconds is None:
                    break
        if cluster.writer is not None:
            cluster.writer.halt.set()
            cluster.writer.join(30)
        # Everything written reaches the leaf, then the databases are compared.
        probe_lag(cluster, SETTLE_BOUND)
    finally:
        # The cluster's processes run in sessions of their own: whatever happened above, they
        # are stopped here, last and unconditionally.
        try:
            observer.halt.set()
            supervisor.halt.set()
            if observer.is_alive():
                observer.join(10)
            if supervisor.is_alive():
                supervisor.join(10)
            supervisor.history.close()
            stop(listeners)
            harness.close()
        finally:
            cluster.close()
            if sys.exc_info()[0] is not None:
                cluster.disk.release()  # no check follows: leave no mount behind
    try:
        report = checker.check(directory)
    finally:
        cluster.disk.release()
    report["seed"] = plan.seed
    if lost:
        report["root_failover"] = "auto" if plan.auto_failover else "manual"
        timings = [loss["failover_seconds"] for loss in report["root_losses"]]
        report["auto_failover_seconds"] = timings[0] if timings else None
    report["duration_s"] = round(time.monotonic() - started, 1)
    (directory / "report.json").write_text(json.dumps(report, indent=2) + "\n")
    return report
