"""Automatic set failover's actor (issue 30, step 1): thin and fenced. All judgement is in the
pure decision (:func:`baton.cascade.auto_failover.decide_failover`); this only observes
(:mod:`baton.service.auto_view`), asks, logs, counts, and runs the failover ``baton cascade
failover`` runs.

One actor per cluster: every node agent campaigns in the election ``auto-failover``
(:data:`baton.keys.AUTO_FAILOVER`, an :class:`~baton.lease.election.Election` with its fencing
epoch); the leader makes a pass every ``interval`` over the sets whose switch is on
(``baton cascade auto-failover SET on``). Before it fails a root over it (1) checks its term is
still valid, (2) writes the decision to ``auto-failover/<set>`` conditioned on its lease at its
epoch (a deposed actor's write is refused by the store), and (3) fences the members with its
epoch (:func:`baton.cascade.auto_switch.fence`: a member that has seen a higher epoch refuses).
A refusal at any step changes nothing and is logged; the failover itself is resumable, so a
successor that finds it half done finishes it.

A decision on a set whose switch is on is one log line when it differs from the last one
logged, and at every failover (``auto-failover decision``: set,
action, reason, the seconds the pass observed for, the seconds the root has been seen lost, the
failover's seconds, the epoch), and the counter ``baton_cascade_auto_failover_decisions_total``
(labels set, action) and ``baton_cascade_auto_failovers_total`` (set, outcome) count them.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter

from baton.cascade import auto_switch, set_ops, takeover
from baton.cascade.auto_failover import Action, Decision, decide_failover
from baton.cascade.set_ops import CascadeSet
from baton.clock import SYSTEM, Clock
from baton.errors import BatonError, CascadeError, LeaseLost, StaleEpoch, StoreError
from baton.keys import AUTO_FAILOVER, auto_failover_record
from baton.lease.election import Election, Term
from baton.lease.timings import Timings
from baton.logs import describe
from baton.service.auto_view import REACH_FRESH, observe, read_cluster
from baton.store import Store

log = logging.getLogger("baton.cascade")

#: Seconds between two passes of the leading actor (the time a failover may wait for the next
#: pass, after the root's lease lapsed and its members reported).
INTERVAL = 0.5


@dataclass(frozen=True, slots=True)
class Outcome:
    """What one pass did about one set."""

    set_name: str
    decision: Decision
    #: The failover's result: the new root (None: none was run, or it was refused).
    promoted: str | None = None
    #: Why a failover the decision asked for was not run ("" when it ran or none was asked).
    refused: str = ""


class AutoFailover:
    """The actor of node ``node_id``: campaigns, and while it leads, passes over the sets."""

    def __init__(
        self,
        store: Store,
        node_id: str,
        timings: Timings | None = None,
        *,
        registry: CollectorRegistry | None = None,
        clock: Clock = SYSTEM,
        interval: float = INTERVAL,
        fresh: float = REACH_FRESH,
    ) -> None:
        self.store = store
        self.clock = clock
        self.interval = interval
        self.fresh = fresh
        self.election = Election(store, AUTO_FAILOVER, node_id, timings, clock=clock)
        #: Set -> the clock's monotonic time the root was first seen lost (for the log line).
        self._lost_since: dict[str, float] = {}
        #: Passes made so far (while leading).
        self.passes = 0
        #: Set -> the last (action, reason) logged: a decision is logged when it changes, so a
        #: healthy set says "nothing" once, not every second.
        self._said: dict[str, tuple[Action, str]] = {}
        self.decisions = Counter(
            "baton_cascade_auto_failover_decisions_total",
            "Automatic failover's decisions, per set and action",
            ["set", "action"],
            registry=registry,
        )
        self.failovers = Counter(
            "baton_cascade_auto_failovers_total",
            "Automatic failovers run (done) or refused at the fence (refused), per set",
            ["set", "outcome"],
            registry=registry,
        )

    async def run(self) -> None:
        """Campaign, and pass over the sets while leading (until cancelled)."""
        await self.election.start()
        try:
            while True:
                try:
                    async with self.election.leadership() as term:
                        while True:
                            await self.pass_once(term)
                            await self.clock.sleep(self.interval)
                except LeaseLost as exc:
                    log.info("auto-failover actor deposed", extra={"error": describe(exc)})
                except Exception as exc:
                    # Keep campaigning whatever a pass met (a store or database that failed,
                    # or a bug, whose trace is kept): the next pass decides again.
                    log.warning(
                        "auto-failover pass failed",
                        extra={"error": describe(exc)},
                        exc_info=not isinstance(exc, BatonError | OSError),
                    )
                    await self.clock.sleep(self.interval)
        finally:
            await self.election.stop()

    async def pass_once(self, term: Term) -> list[Outcome]:
        """Observe every set whose switch is on, decide, and act on a FAILOVER (fenced by
        ``term``)."""
        started = self.clock.monotonic()
        cluster = await read_cluster(self.store, self.fresh)
        views = await asyncio.to_thread(observe, cluster)
        observed = self.clock.monotonic() - started
        self.passes += 1
        out = []
        for c, view in views:
            decision = decide_failover(view)
            now = self.clock.monotonic()
            lost_for = 0.0
            if decision.dead_root is None:
                self._lost_since.pop(view.set_name, None)
            else:
                lost_for = now - self._lost_since.setdefault(view.set_name, now)
            outcome = Outcome(view.set_name, decision)
            took = 0.0
            if decision.action is Action.FAILOVER:
                outcome = await self._fail_over(c, term, decision)
                took = self.clock.monotonic() - now
            self.decisions.labels(view.set_name, decision.action.value).inc()
            said = (decision.action, decision.reason)
            if decision.action is not Action.FAILOVER and self._said.get(view.set_name) == said:
                out.append(outcome)
                continue
            self._said[view.set_name] = said
            log.log(
                logging.WARNING if decision.action is Action.FAILOVER else logging.INFO,
                "auto-failover decision",
                extra={
                    "set": view.set_name,
                    "action": decision.action.value,
                    "reason": decision.reason,
                    "promoted": outcome.promoted or "",
                    "refused": outcome.refused,
                    "observed_s": round(observed, 3),
                    "lost_for_s": round(lost_for, 3),
                    "failover_s": round(took, 3),
                    "epoch": term.epoch,
                },
            )
            out.append(outcome)
        return out

    async def _fail_over(self, c: CascadeSet, term: Term, decision: Decision) -> Outcome:
        assert decision.dead_root is not None
        name = c.set_name
        try:
            term.check()
            body = {"dead_root": decision.dead_root, "new_root": decision.new_root,
                    "reason": decision.reason, "epoch": term.epoch,
                    "at": await self.store.now()}  # fmt: skip
            written = await self.store.put(
                auto_failover_record(name), json.dumps(body).encode(), lease=term.lease
            )
            if not written.ok:
                raise StaleEpoch(f"auto-failover lease no longer held at epoch {term.epoch}")
            promoted = await asyncio.to_thread(run_failover, c, decision.dead_root, term.epoch)
        except (StaleEpoch, LeaseLost, StoreError, CascadeError, OSError) as exc:
            # Refused by the fence, the store or the set's state: nothing changed (or a
            # resumable failover stopped part way; the next pass decides again).
            self.failovers.labels(name, "refused").inc()
            return Outcome(name, decision, refused=describe(exc))
        self.failovers.labels(name, "done").inc()
        self._lost_since.pop(name, None)
        return Outcome(name, decision, promoted=promoted)


def run_failover(c: CascadeSet, dead_root: str, epoch: int) -> str:
    """Fence the members with ``epoch``, then run the failover ``baton cascade failover
    DEAD_ROOT`` runs; the new root. :class:`StaleEpoch` when a member has seen a higher
    epoch (nothing changed)."""
    auto_switch.fence(c, epoch)
    with set_ops.refusing():
        new_root, _fork, _notes = takeover.failover(c, dead_root)
    return new_root


__all__ = ["INTERVAL", "AutoFailover", "Outcome", "run_failover"]
