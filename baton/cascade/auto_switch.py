"""Automatic failover's per-set switch (``baton cascade auto-failover SET on|off``) and the
fence its actor passes before it fails a root over.

**Where the switch lives**: in the members' node databases, local key ``auto_failover`` =
``{"on": bool, "at": wall time}``, the newest copy winning, off by default (see
:mod:`baton.cascade.member_setting`, which says why there).

**The fence**: the actor is elected (:class:`~baton.lease.election.Election`), and its epoch
is written into every reachable member (local key ``auto_failover_epoch``) before it fails a
root over; a member that has seen a higher epoch refuses (:class:`~baton.errors.StaleEpoch`),
so an actor paused past its term, whose successor already acted on the set, changes nothing.
"""

from __future__ import annotations

from baton.cascade.db import open_node_db
from baton.cascade.member_setting import MemberSetting, check_set_name
from baton.cascade.set_ops import CascadeSet, seen_of
from baton.errors import CascadeError, Refused, StaleEpoch

_KEY = "auto_failover"
_EPOCH = "auto_failover_epoch"


#: The switch: on or off.
SWITCH: MemberSetting[bool] = MemberSetting(_KEY, "on", bool, False)


def switch_of(c: CascadeSet) -> bool:
    """Whether automatic failover is on for the set: the newest copy among the reachable
    members not tagged dead (off when none has one)."""
    return SWITCH.of(c)


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
    check_set_name(c, set_name)
    if on and not can_promote(c):
        raise Refused(
            f"set {set_name} has no branch to promote (a live member that carries the queue): "
            "automatic failover could never act; add a branch with create-branch first"
        )
    return SWITCH.write(c, on)


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


__all__ = ["SWITCH", "can_promote", "fence", "set_switch", "switch_of"]
