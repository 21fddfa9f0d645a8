"""Automatic failover's per-set switch (``baton cascade auto-failover SET on|off``) and the
fence its actor passes before it fails a root over.

**Where the switch lives: in the members' node databases**, as the set's other settings do
(its node list, the dead tags, pause). Why there and not in the coordination store: every
``baton cascade`` verb reaches a set through ``--via`` alone, with no store; the setting has
to outlive the root it is about (a failover must find it at the branches while the root's
database is gone), and the branches carry it; and a set moved to another cluster, or run by
``baton cascade run`` without placement, keeps it. Each reachable member not tagged dead holds
the local key ``auto_failover``: ``{"on": bool, "at": wall time}``. The newest value read wins,
so a member that was unreachable when the switch was flipped (and still holds the old value)
does not flip it back; a member that never had one says nothing (off by default).

**The fence**: the actor is elected (:class:`~baton.lease.election.Election`), and its epoch
is written into every reachable member (local key ``auto_failover_epoch``) before it fails a
root over; a member that has seen a higher epoch refuses (:class:`~baton.errors.StaleEpoch`),
so an actor paused past its term, whose successor already acted on the set, changes nothing.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

from baton.cascade.db import NodeDB, open_node_db
from baton.cascade.set_ops import CascadeSet, seen_of
from baton.errors import CascadeError, CascadeInputError, Refused, StaleEpoch

_KEY = "auto_failover"
_EPOCH = "auto_failover_epoch"


@dataclass(frozen=True, slots=True)
class Switch:
    """One member's copy of the switch."""

    on: bool
    #: When it was flipped (wall time of the host that flipped it).
    at: float


def read_switch(db: NodeDB) -> Switch | None:
    """This member's copy of the switch (None: never set here, or not a value baton wrote)."""
    raw = db.get_local(_KEY)
    if raw is None:
        return None
    try:
        data = json.loads(raw)
        return Switch(bool(data["on"]), float(data["at"]))
    except (ValueError, KeyError, TypeError):
        return None


def switch_of(c: CascadeSet) -> bool:
    """Whether automatic failover is on for the set: the newest copy among the reachable
    members not tagged dead (off when none has one)."""
    newest: Switch | None = None
    for _name, (location, dead) in sorted(c.nodes.items()):
        if dead:
            continue
        try:
            with open_node_db(location, readonly=True) as db:
                found = read_switch(db)
        except (CascadeError, OSError):
            continue  # unreachable: the others say it
        if found is not None and (newest is None or found.at > newest.at):
            newest = found
    return newest is not None and newest.on


def can_promote(c: CascadeSet) -> bool:
    """Whether the set has a branch a failover could promote (a live member, not the root,
    that carries the queue)."""
    for name, (_, dead) in sorted(c.nodes.items()):
        if dead:
            continue
        seen = seen_of(c, name)
        st = seen.state
        if st is not None and st.provider is not None and st.role.carries_queue:
            return True
    return False


def set_switch(c: CascadeSet, set_name: str, on: bool) -> list[str]:
    """Turn automatic failover on or off for the set at ``c``; the members not reached (they
    keep their old copy, which the newer one outweighs). Bad input changes nothing: a set of
    another name (:class:`CascadeInputError`), or ``on`` for a set without a branch to promote
    (:class:`Refused`)."""
    if c.set_name != set_name:
        raise CascadeInputError(
            f"no set {set_name!r} at that member: it is in set {c.set_name} (check the set's "
            "name and --via)"
        )
    if on and not can_promote(c):
        raise Refused(
            f"set {set_name} has no branch to promote (a live member that carries the queue): "
            "automatic failover could never act; add a branch with create-branch first"
        )
    value = json.dumps({"on": on, "at": time.time()})

    def put(db: NodeDB) -> None:
        with db.transaction() as cur:
            db.set_local(cur, _KEY, value)

    return c._for_each_live(put)


def fence(c: CascadeSet, epoch: int) -> None:
    """Record the actor's ``epoch`` in every reachable member not tagged dead, refusing
    (:class:`StaleEpoch`, before any member's is raised past what it was) when one has seen
    a higher one. Members are checked in one pass and written in a second: a refusal writes
    nothing."""
    seen: list[str] = []
    for name, (location, dead) in sorted(c.nodes.items()):
        if dead:
            continue
        try:
            with open_node_db(location, readonly=True) as db:
                highest = int(db.get_local(_EPOCH) or 0)
        except (CascadeError, OSError, ValueError):
            continue  # unreachable (the dead root, usually): nothing to fence there
        if highest > epoch:
            raise StaleEpoch(
                f"automatic failover at epoch {epoch} refused: {name} has seen epoch {highest}"
            )
        seen.append(location)
    for location in seen:
        try:
            with open_node_db(location) as db, db.transaction() as cur:
                if int(db.get_local(_EPOCH) or 0) > epoch:
                    raise StaleEpoch(f"automatic failover at epoch {epoch} refused: overtaken")
                db.set_local(cur, _EPOCH, str(epoch))
        except (CascadeError, OSError) as exc:
            if isinstance(exc, StaleEpoch):
                raise
            continue  # went away since the first pass: the failover will note it


__all__ = ["Switch", "can_promote", "fence", "read_switch", "set_switch", "switch_of"]
