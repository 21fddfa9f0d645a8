"""The nemesis: faults injected at random, in combination, each one recorded in the history.

A fault starts at once and has a repair that runs when its time is up. Kills restart the process
after a short delay; pauses resume it; partitions heal; a full disk is freed; a clock jump stays
(clocks do not come back), so the next jump of that process adds to it. Faults are drawn from one
seeded generator, so a seed and a fault count reproduce a run's schedule (the cluster's own
timing still varies).
"""

from __future__ import annotations

import contextlib
import enum
import os
import random
import shutil
import signal
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from baton.chaos.cluster import LEASES
from baton.errors import WaitTimeout
from baton.local.waiting import wait_for

if TYPE_CHECKING:
    from baton.chaos.cluster import ChaosCluster
    from baton.chaos.history import History

#: Every kind of fault, with its weight in the random choice.
KINDS: dict[str, int] = {
    "kill-agent": 3,
    "kill-elect": 3,
    "kill-jvm": 2,
    "kill-store": 1,
    "kill-master": 1,
    "store-lost": 1,
    "pause-agent": 2,
    "pause-elect": 2,
    "isolate": 2,
    "cut-pair": 2,
    "drop-one-way": 2,
    "cut-from-store": 2,
    "clock-jump": 2,
    "disk-full": 1,
    "kill-failover": 2,
}


class LossKind(enum.StrEnum):
    """How the host that serves the cascade's root is lost."""

    KILL = "kill"
    """Its agent's process group SIGKILLed (the root's service with it)."""
    FREEZE = "freeze"
    """Its agent's process group SIGSTOPped, SIGCONT once the root was failed over."""
    ISOLATE = "isolate"
    """Cut off from every other host and from the store (nftables), healed after the failover."""


#: The fault kind under which a loss of the root's host is drawn, for each way it is lost.
LOSS_FAULT = {
    LossKind.KILL: "kill-agent",
    LossKind.FREEZE: "pause-agent",
    LossKind.ISOLATE: "isolate",
}


def _nothing() -> None:
    return None


@dataclass
class Fault:
    """One fault: what, on what (``busy`` names what it holds), how to start and repair it."""

    kind: str
    target: str
    duration: float
    # What they return is not used (a process's start returns the process).
    start: Callable[[], object] = field(repr=False)
    repair: Callable[[], object] = field(repr=False, default=_nothing)
    busy: frozenset[str] = frozenset()
    number: int = 0
    ends: float = 0.0


#: Builds the fault that loses the root's host ``host`` in the given way, or None when ``host``
#: does not serve the root now (or the root was already lost once).
RootFault = Callable[[LossKind, str], Fault | None]


class Nemesis:
    """Injects the faults of :data:`KINDS` into a :class:`ChaosCluster`.

    Pauses and partitions last 1.5 to 3 ttl, so they outlive a lease (the case fencing is for);
    kills restart after 0.2 to 1 ttl. The nft rules of all partitions are healed together, so
    one network fault at a time is active (they all hold ``net``).
    """

    def __init__(
        self,
        cluster: ChaosCluster,
        rng: random.Random,
        history: History,
        kinds: Collection[str] = (),
        root_fault: RootFault | None = None,
    ) -> None:
        """``kinds`` narrows the draw to those kinds (all of :data:`KINDS` when empty).
        ``root_fault``: a kill-agent, pause-agent or isolate drawn on the host that serves the
        cascade's root becomes the root's loss, as ``root_fault`` builds it."""
        self.root_fault = root_fault
        self.kinds = {kind: KINDS[kind] for kind in kinds} or dict(KINDS)
        self.cluster = cluster
        self.rng = rng
        self.history = history
        self.count = 0
        self.clock_shift: dict[str, int] = {}
        self._make: dict[str, Callable[[], Fault | None]] = {
            kind: getattr(self, "_" + kind.replace("-", "_")) for kind in KINDS
        }

    def inject(self, now: float, busy: set[str]) -> Fault | None:
        """Start one fault that holds nothing in ``busy`` (None when ten draws all collided)."""
        kinds, weights = zip(*self.kinds.items(), strict=True)
        for _ in range(10):
            kind = self.rng.choices(kinds, weights)[0]
            fault = self._make[kind]()
            if fault is None or fault.busy & busy:
                continue
            self.count += 1
            fault.number, fault.ends = self.count, now + fault.duration
            self.history.record("fault-start", n=fault.number, fault=kind, target=fault.target)
            fault.start()
            return fault
        return None

    def repair(self, fault: Fault) -> None:
        fault.repair()
        self.history.record("fault-end", n=fault.number, fault=fault.kind, target=fault.target)

    # -- the kinds -----------------------------------------------------------------------------

    def _long(self) -> float:
        return self.rng.uniform(1.5, 3.0) * self.cluster.ttl

    def _short(self) -> float:
        return self.rng.uniform(0.2, 1.0) * self.cluster.ttl

    def _host(self) -> str:
        return self.rng.choice(self.cluster.hosts)

    def _elect(self) -> str:
        return f"elect-{self.rng.choice(LEASES)}-{self._host()}"

    def _killed(self, kind: str, name: str) -> Fault:
        svc = self.cluster.services[name]
        return Fault(kind, name, self._short(), svc.kill, svc.start, frozenset({name}))

    def _paused(self, kind: str, name: str) -> Fault:
        svc = self.cluster.services[name]
        return Fault(
            kind,
            name,
            self._long(),
            svc.pause,
            svc.resume,
            frozenset({name}),
        )

    def _of_root(self, kind: LossKind, host: str) -> Fault | None:
        return None if self.root_fault is None else self.root_fault(kind, host)

    def _kill_agent(self) -> Fault:
        host = self._host()
        return self._of_root(LossKind.KILL, host) or self._killed("kill-agent", f"agent-{host}")

    def _kill_elect(self) -> Fault:
        return self._killed("kill-elect", self._elect())

    def _kill_store(self) -> Fault:
        # Down from a moment (back before a switch can start: the restart races the round) to
        # well past the time a switch takes (with store failover: a replica is promoted, and the
        # old master comes back as a master of its own until a server makes it a replica).
        name = self.rng.choice(self.cluster.stores)
        svc = self.cluster.services[name]
        down = self.rng.uniform(0.2, 3.0) * self.cluster.ttl
        return Fault("kill-store", name, down, svc.kill, svc.start, frozenset({"store"}))

    def _kill_master(self) -> Fault | None:
        # The store master every file names, started again with its data right after the
        # switch that replaces it: it must become a replica, never stay a second master, and
        # the next kill must switch again (issue 27: two servers once adopted the returning
        # master and stopped switching).
        master = self.cluster.store_master() if self.cluster.failover else None
        names = [n for n in self.cluster.stores if self.cluster.store_address(n) == master]
        if not names:
            return None
        name = names[0]
        svc = self.cluster.services[name]

        def after_the_switch() -> None:
            with contextlib.suppress(WaitTimeout):
                wait_for(
                    lambda: self.cluster.store_master() not in (None, master),
                    timeout=6 * self.cluster.ttl,
                    what="the switch away from the killed master",
                )
            svc.start()

        return Fault(
            "kill-master", name, self._long(), svc.kill, after_the_switch, frozenset({"store"})
        )

    def _kill_failover(self) -> Fault | None:
        # A failover client (its host's file stays as it was; a switch waits for it) or server.
        names = self.cluster.failover_services()
        if not names:
            return None
        return self._killed("kill-failover", self.rng.choice(names))

    def _kill_jvm(self) -> Fault | None:
        # A Spark driver of an agent that runs one (a cascade worker's); the agent must notice
        # and go on with a new one.
        hosts = [h for h in self.cluster.hosts if self.cluster.jvms(f"agent-{h}")]
        if not hosts:
            return None
        name = f"agent-{self.rng.choice(hosts)}"

        def kill() -> None:
            for pid in self.cluster.jvms(name):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)

        return Fault("kill-jvm", name, 0.0, kill, busy=frozenset({name}))

    def _store_lost(self) -> Fault:
        name = self.rng.choice(self.cluster.stores)
        svc = self.cluster.services[name]
        data = self.cluster.store_dir(name)

        def lose() -> None:
            svc.kill()
            shutil.rmtree(data, ignore_errors=True)
            data.mkdir()

        def restore() -> None:
            self.cluster.restart(name)
            self.cluster.declare_objects()

        return Fault("store-lost", name, self._short(), lose, restore, frozenset({"store"}))

    def _pause_agent(self) -> Fault:
        host = self._host()
        return self._of_root(LossKind.FREEZE, host) or self._paused("pause-agent", f"agent-{host}")

    def _pause_elect(self) -> Fault:
        return self._paused("pause-elect", self._elect())

    def _partition(self, kind: str, target: str, start: Callable[[], None]) -> Fault:
        return Fault(kind, target, self._long(), start, self.cluster.net.heal, frozenset({"net"}))

    def _isolate(self) -> Fault:
        host = self._host()
        root = self._of_root(LossKind.ISOLATE, host)
        if root is not None:
            return root
        return self._partition("isolate", host, lambda: self.cluster.net.isolate(host))

    def _cut_pair(self) -> Fault:
        a, b = self.rng.sample(self.cluster.hosts, 2)
        return self._partition("cut-pair", f"{a}|{b}", lambda: self.cluster.net.cut(a, b))

    def _drop_one_way(self) -> Fault:
        a, b = self.rng.sample(self.cluster.hosts, 2)
        return self._partition("drop-one-way", f"{a}>{b}", lambda: self.cluster.net.drop(a, b))

    def _cut_from_store(self) -> Fault:
        host = self._host()
        return self._partition("cut-from-store", host, lambda: self.cluster.net.cut(host, "st"))

    def _clock_jump(self) -> Fault:
        name = self._elect()

        def jump() -> None:
            shift = self.clock_shift.get(name, 0) + self.rng.randint(5, 60)
            self.clock_shift[name] = shift
            self.cluster.clock_files[name].write_text(f"+{shift}s\n")

        return Fault("clock-jump", name, 0.0, jump, busy=frozenset({name}))

    def _disk_full(self) -> Fault:
        # The branch's database cannot grow for a while: its apply and its queue must wait and
        # go on, with nothing lost or applied twice.
        return Fault(
            "disk-full",
            "disk",
            self.rng.uniform(2.0, 5.0) * self.cluster.ttl,
            self.cluster.disk.fill,
            self.cluster.disk.free,
            frozenset({"disk"}),
        )
