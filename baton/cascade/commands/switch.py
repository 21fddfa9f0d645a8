"""Moving the root or a branch: switchover (planned), failover (unplanned), resurrect (an old
root back), and a branch replaced by another (node-switchover, node-failover)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from baton.cascade import auto_switch, handover, node_replace, set_ops, sync_mode, takeover
from baton.cascade.commands.sets import MAX_BEHIND, known, open_set
from baton.cascade.handover import SwitchPlan
from baton.errors import CascadeInputError

# -- switchover, failover, resurrect ------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class Switched:
    new_root: str
    #: The root before (None if there was none).
    old_root: str | None
    #: The switch tick: the new root is the root from it.
    tick: int
    already: bool


def switchover(
    via: str, new_root: str, timeout: float = 60.0, max_behind: int = MAX_BEHIND
) -> Switched:
    """Planned: the branch ``new_root`` becomes the root, the old root its branch (nothing
    lost). Refused, changing nothing, unless ``new_root``'s worker runs, applies and is at most
    ``max_behind`` ticks behind (:func:`switch_plan`). Waits up to ``timeout`` seconds for it to
    apply the switch tick; raises :class:`NotFinished` if it did not (the old root no longer
    captures: run it again)."""
    if not timeout > 0:
        raise CascadeInputError(f"bad timeout {timeout!r}: give a number of seconds above 0")
    c = _switch_set(via, new_root, max_behind)
    old = set_ops.live_root(c)
    with set_ops.refusing():
        tick = handover.switchover(c, new_root, timeout=timeout, max_behind=max_behind)
    return Switched(new_root, old, tick, old == new_root)


def switch_plan(via: str, new_root: str, max_behind: int = MAX_BEHIND) -> SwitchPlan:
    """What :func:`switchover` would do (``--dry-run``), after the same checks; changes
    nothing."""
    c = _switch_set(via, new_root, max_behind)
    with set_ops.refusing():
        return handover.switch_plan(c, new_root, max_behind)


def _switch_set(via: str, new_root: str, max_behind: int) -> set_ops.CascadeSet:
    if max_behind < 0:
        raise CascadeInputError(
            f"bad --max-behind {max_behind!r}: give a number of ticks, 0 or more"
        )
    c = open_set(via)
    known(c, new_root)  # unknown names first, with the known ones
    return c


@dataclasses.dataclass(frozen=True, slots=True)
class FailedOver:
    dead_root: str
    new_root: str
    #: The new root's last tick when promoted: the set goes on from it.
    fork: int
    #: One line per node that needs attention.
    notes: list[str]


def failover(via: str, dead_root: str, accept_loss: bool = False) -> FailedOver:
    """Unplanned: ``dead_root`` is gone. Tag it dead, promote the live branch with the highest
    tick and redirect the nodes that received from ``dead_root``. In sync mode refused when
    no live branch holds every acknowledged transaction, unless ``accept_loss``."""
    c = open_set(via)
    known(c, dead_root)  # unknown names first, with the known ones
    with set_ops.refusing():
        new_root, fork, notes = takeover.failover(c, dead_root, accept_loss)
    return FailedOver(dead_root, new_root, fork, notes)


@dataclasses.dataclass(frozen=True, slots=True)
class Resurrected:
    node: str
    #: Its provider now: the current root.
    provider: str | None
    #: The fork tick, where it goes on from.
    fork: int
    #: Events saved to ``file`` by this run (0 on a re-run: the file is kept).
    saved: int
    file: str


def resurrect(via: str, old_root: str, save: Path) -> Resurrected:
    """``old_root`` came back after a failover: save the events it had after the fork to
    ``save`` (JSON lines, a file on this host), and make it a branch of the current root."""
    c = open_set(via)
    known(c, old_root)
    if not save.parent.is_dir():
        raise CascadeInputError(f"{save}: directory {save.parent} does not exist")
    if save.is_dir():
        raise CascadeInputError(f"{save} is a directory: give a file name")
    with set_ops.refusing():
        saved = takeover.resurrect(c, old_root, save)
    st = c.state(old_root)
    return Resurrected(old_root, st.provider, st.position, saved, str(save))


# -- replacing a branch --------------------------------------------------------------------------


def replace_node(
    via: str, new: str, old: str, *, failover: bool, timeout: float = 60.0
) -> node_replace.Replaced:
    """``node-switchover`` (``failover`` False) or ``node-failover``: ``new`` takes branch
    ``old``'s place (see :mod:`baton.cascade.node_replace`). Waits up to ``timeout`` seconds
    for ``new``'s worker; :class:`NotFinished` if it did not get there (run it again)."""
    if not timeout > 0:
        raise CascadeInputError(f"bad timeout {timeout!r}: give a number of seconds above 0")
    c = open_set(via)
    known(c, new, old)
    return node_replace.replace(c, new, old, failover=failover, timeout=timeout)


# -- automatic failover's switch --------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class AutoFailover:
    set: str
    on: bool
    #: Members not reached (they keep their old copy, which the new one outweighs).
    missed: list[str]


def auto_failover(via: str, set_name: str, on: bool) -> AutoFailover:
    """Turn automatic failover of ``set_name`` on or off (see :mod:`baton.cascade.auto_switch`
    for where the switch lives). Refused, changing nothing, for a set of another name or, to
    turn it on, a set without a branch to promote."""
    c = open_set(via)
    missed = auto_switch.set_switch(c, set_name, on)
    return AutoFailover(set_name, on, missed)


# -- synchronous mode's setting ---------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class SyncSet:
    set: str
    #: Branches a commit waits for (0: asynchronous).
    sync: int
    #: Members not reached (they keep their old copy, which the new one outweighs).
    missed: list[str]


def sync(via: str, set_name: str, k: int) -> SyncSet:
    """Set synchronous mode of ``set_name`` to ``k`` branches (0: asynchronous; see
    :mod:`baton.cascade.sync_mode`). Refused, changing nothing, for a set of another name, a
    negative ``k`` or one larger than the set's branches."""
    c = open_set(via)
    missed = sync_mode.set_sync(c, set_name, k)
    return SyncSet(set_name, k, missed)
