"""Planned: ``switchover`` (a branch becomes the root, the old root its branch, nothing lost
or applied twice), checked before it changes anything (:func:`switch_plan`), and the
promotion and demotion it shares with a failover.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from baton.cascade import beat
from baton.cascade.beat import Beat, Phase, ServiceState
from baton.cascade.db import NodeDB
from baton.cascade.model import WATERMARK, Role
from baton.cascade.set_ops import (
    CascadeSet,
    find_root,
    root_since,
)
from baton.errors import (
    NotFinished,
    Refused,
    redact_url,
)

#: How often :func:`poll` (a switchover's default wait) checks its condition, in seconds.
POLL = 0.1


# -- switchover and failover ------------------------------------------------------------------


def poll(condition: Callable[[], bool], timeout: float) -> None:
    """Wait for ``condition``, checking it every :data:`POLL` seconds; :class:`NotFinished`
    after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() >= deadline:
            raise NotFinished(f"the condition did not hold within {timeout:g}s")
        time.sleep(POLL)


def promote(db: NodeDB) -> int:
    """Make ``db``'s node the root: capture its tables, no provider. Its tick id sequence goes
    on from the last tick it has; returns that tick (the fork point)."""
    last = db.last_tick()
    fork = last.tick_id if last else 0
    with db.transaction() as cur:
        db.bump_event_ids(cur, last.ev_high if last else 0)
        # The root first: the tables below are captured here from now on, not guarded.
        db.set_local(cur, "role", Role.ROOT.value)
        for table, state in db.tables().items():
            if state in ("ok", "catching-up"):
                db.guard(cur, table, False)
                db.capture(cur, table, True)
                db.set_table(cur, table, "ok", 0)
            # A root applies no batch: nothing of a copy's is left to skip.
            db.set_reflected(cur, table, 0, ())
        db.set_local(cur, "provider", None)
        db.set_local(cur, "root_since", str(fork))
        db.set_local(cur, "position", str(fork))
    return fork


def demote(db: NodeDB, provider: str, position: int, root: str | None = None) -> None:
    with db.transaction() as cur:
        for table in db.tables():
            db.capture(cur, table, False)
        db.set_local(cur, "role", Role.BRANCH.value)
        db.set_local(cur, "provider", provider)
        for table in db.tables():
            db.guard(cur, table, True, db.guard_message(table, root or provider))
        db.set_local(cur, "position", str(position))


def require_applying(
    c: CascadeSet, node: str, served: Beat | None, then: str, unchanged: str
) -> None:
    """Refuse (:class:`Refused`, one line: what to start, ``then`` what to do, and
    ``unchanged``, what the refusal left as it was) unless ``node``'s worker runs and applies,
    by its last heartbeat ``served``: an operation that waits for it would wait in vain."""
    now = time.time()
    if served is None or served.state(now) is not ServiceState.RUNNING:
        seen = "" if served is None else f", last seen {now - served.at:.0f}s ago"
        raise Refused(
            f"{node}'s worker is not running{seen}: start `baton cascade run "
            f"{redact_url(c.location(node))}` (or its cascade-worker object) and {then}; "
            f"{unchanged}"
        )
    if served.phase is not Phase.APPLYING:
        doing = served.error if served.phase is Phase.WAITING else "starting Spark"
        raise Refused(
            f"{node}'s worker is not applying yet ({doing}): {then} once `baton cascade "
            f"status` shows it applying; {unchanged}"
        )


def served_by(c: CascadeSet, node: str) -> Beat | None:
    """``node``'s last heartbeat (:mod:`baton.cascade.beat`)."""
    with c.db(node) as db:
        return beat.read(db)


#: How many ticks a switchover's target may be behind the root (the old root captures nothing
#: while the target catches up, so writes wait that long).
MAX_BEHIND = 1000


@dataclass(frozen=True, slots=True)
class SwitchPlan:
    """What a switchover to ``new_root`` would do, checked (:func:`switch_plan`)."""

    root: str
    new_root: str
    #: The switch tick of a switchover under way (None: none begun).
    under_way: int | None
    #: Ticks ``new_root`` has to apply before it can take over.
    behind: int
    #: What serves ``new_root`` (None: nothing, and nothing is needed: it applied the switch).
    service: Beat | None
    steps: list[str]


def switch_plan(c: CascadeSet, new_root: str, max_behind: int = MAX_BEHIND) -> SwitchPlan:
    """Check that a switchover to ``new_root`` can finish, before anything changes: it is a
    branch, its worker runs and applies (its heartbeat, :mod:`baton.cascade.beat`), and it is
    at most ``max_behind`` ticks behind the root. :class:`Refused` says what to do when not.
    The plan lists the steps the switchover takes."""
    root = find_root(c)
    if root == new_root:
        return SwitchPlan(root, new_root, None, 0, None, [f"{new_root} is already the root"])
    with c.db(new_root) as ndb:
        nst = ndb.state()
        served = beat.read(ndb)
    if nst.role is not Role.BRANCH:
        raise Refused(f"{new_root} is a {nst.role}: only a branch can become the root")
    with c.db(root) as rdb:
        under_way = rdb.get_local("switch_tick")
        last = rdb.last_tick()
        tables = sorted(rdb.tables())
    goal = int(under_way) if under_way is not None else (last.tick_id if last else 0)
    behind = max(0, goal - nst.position)
    if under_way is None or behind:
        # Something has to apply the ticks that remain and the switch tick: a live worker,
        # applying now (a switch under way whose tick it applied only has to be finished).
        require_applying(
            c,
            new_root,
            served,
            "run the switchover again",
            "nothing was changed"
            if under_way is None
            else f"the switchover begun at tick {under_way} is still under way ({root} "
            "refuses writes until it finishes)",
        )
        if under_way is None and behind > max_behind:
            raise Refused(
                f"{new_root} is {behind} ticks behind {root} (at most {max_behind}): wait "
                "until it catches up, or give a larger --max-behind; nothing was changed"
            )
    steps = []
    if under_way is None:
        steps.append(
            f"{root} stops capturing {', '.join(tables) or 'its tables'} and makes the switch "
            f"tick; from then on writes at {root} are refused (move writers to {new_root})"
        )
    else:
        steps.append(f"the switchover to {new_root} begun at tick {under_way} goes on")
    steps += [
        f"{new_root} applies the {behind} tick(s) it lacks, then the switch tick"
        if under_way is None
        else f"{new_root} applies the {behind} tick(s) it lacks up to the switch tick",
        f"{new_root} becomes the root; {root} becomes its branch",
    ]
    return SwitchPlan(root, new_root, None if under_way is None else int(under_way), behind,
                      served, steps)  # fmt: skip


def switchover(
    c: CascadeSet,
    new_root: str,
    wait: Callable[[Callable[[], bool], float], None] = poll,
    timeout: float = 60.0,
    max_behind: int = MAX_BEHIND,
) -> int:
    """Planned: ``new_root`` (a branch) becomes the root and the old root its branch, with no
    event lost or applied twice. The old root stops capturing and makes a last tick in one
    transaction; once ``new_root`` has applied that tick it is promoted. Writers must move to the
    new root: the old root refuses direct writes from the switch on (they would not be
    captured). Returns the
    switch tick. ``wait(condition, timeout)`` waits for ``new_root`` to apply the switch tick;
    when it raises :class:`NotFinished` (as :func:`poll` does), so does this, saying what to do
    (the old root no longer captures: run it again)."""
    root = find_root(c)
    if root == new_root:
        return root_since(c, new_root)
    switch_plan(c, new_root, max_behind)  # refuses, changing nothing, a switch that would stall
    with c.db(root) as rdb:
        last_t = rdb.get_local("switch_tick")
        if last_t is None:
            with rdb.transaction() as cur:
                for table in rdb.tables():
                    rdb.capture(cur, table, False)
                    # Not captured from here on: a write here would be lost (issue 28).
                    rdb.guard(
                        cur, table, True,
                        f"baton: {table} at {root} is no longer captured: a switchover to "
                        f"{new_root} is under way; write it at {new_root}",
                    )  # fmt: skip
                tick = rdb.make_tick(cur)
                assert tick is not None
                rdb.set_local(cur, "switch_tick", str(tick.tick_id))
                rdb.set_local(cur, "switch_to", new_root)
            last_t = str(tick.tick_id)
    switch = int(last_t)

    def applied() -> bool:
        return c.state(new_root).position >= switch

    try:
        wait(applied, timeout)
    except NotFinished:
        raise NotFinished(
            f"switchover to {new_root} not finished: it did not apply switch tick {switch} "
            f"within {timeout:g}s (is its worker running?); {root} no longer captures changes: "
            "run the same switchover again to finish it"
        ) from None
    with c.db(root) as rdb:
        # What the old root's subtree still needs (its subscribers' marks include theirs; a
        # slow leaf below may be far behind the switch tick).
        below = min([switch, *(m for n, m in rdb.watermarks().items() if n != new_root)])
        stray = list(rdb.events_after(switch))
        if any(e.type != WATERMARK for e in stray):
            raise Refused(
                f"{root} has {len(stray)} events after the switch tick {switch}: capture did "
                "not stop; nothing was switched"
            )
        with rdb.transaction() as cur:
            rdb.discard_after(cur, switch)  # only our own watermark events, never data
    with c.db(new_root) as ndb:
        if ndb.state().role is not Role.ROOT:
            # Hold the queue for the old root first: the moment the new root ticks it may
            # publish a watermark, and it must not run ahead of the nodes below the old root.
            with ndb.transaction() as cur:
                ndb.set_watermark(cur, root, below)
            promote(ndb)
    with c.db(root) as rdb:
        demote(rdb, new_root, switch)
        with rdb.transaction() as cur:
            rdb.set_local(cur, "switch_tick", None)
            rdb.set_local(cur, "switch_to", None)
    with c.db(new_root) as ndb, ndb.transaction() as cur:
        # The new root pulls the old root's real mark from now on; until then, hold the queue
        # down to what the old root's subtree needed.
        ndb.set_watermark(cur, root, below)
        ndb.drop_subscriber(cur, new_root)
    with c.db(root) as rdb, rdb.transaction() as cur:
        rdb.drop_subscriber(cur, new_root)
    return switch


__all__ = [
    "MAX_BEHIND",
    "POLL",
    "SwitchPlan",
    "demote",
    "poll",
    "promote",
    "require_applying",
    "served_by",
    "switch_plan",
    "switchover",
]
