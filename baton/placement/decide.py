"""One reconciliation decision, as a pure function of what the controller observed.

Given the objects, the group records, the nodes (live, suspect, draining) and what each
reachable node reports about its members, :func:`decide` returns the group records as they
should be. The controller then writes the ones that changed (fenced) and tells the nodes.

Leader failure handling follows seed 001. A group's leader is *suspect* when its node's
membership lease lapsed or the controller cannot reach it. It is deposed only when a majority of
the group's other members report no live stream from it (a member whose own membership lapsed
counts as having none); otherwise the group stays in failure reconciliation (state
``failure``), untouched. The new leader is the member with the highest commit index.

A group with a member that reports its workload cannot run (it could not be created or take
its role) is in state ``error``, with where and why, and is otherwise placed as usual.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from baton.lease.role import Role
from baton.placement.model import TYPE_LABEL, GroupRecord, ObjectSpec, Transfer, group_key
from baton.placement.plan import GroupDemand, NodeSlot, Placement, place


@dataclass(frozen=True, slots=True)
class NodeView:
    """A node as the controller sees it."""

    id: str
    address: str
    capacity: int
    labels: Mapping[str, str]
    types: frozenset[str]
    live: bool  # holds its membership lease
    reachable: bool  # answered the controller's last poll
    draining: bool = False


@dataclass(frozen=True, slots=True)
class Observed:
    """Everything one reconciliation pass decides from."""

    objects: Mapping[str, ObjectSpec]
    groups: Mapping[str, GroupRecord]
    nodes: Mapping[str, NodeView]
    #: node id -> group key -> that node's report for its member of the group.
    reports: Mapping[str, Mapping[str, Mapping[str, Any]]]
    controller_epoch: int
    now: float


@dataclass(slots=True)
class Decision:
    """The groups as they should be (``None``: delete), and what happened on the way."""

    groups: dict[str, GroupRecord | None] = field(default_factory=dict)
    placement: Placement | None = None
    transfers: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    #: Groups with a member whose workload cannot run (state ``error``).
    errors: list[str] = field(default_factory=list)
    #: Groups whose record was behind a term a member reports, given a new term.
    behind: list[str] = field(default_factory=list)


def _report(obs: Observed, node: str, key: str) -> Mapping[str, Any] | None:
    view = obs.nodes.get(node)
    if view is None or not view.live or not view.reachable:
        return None
    return obs.reports.get(node, {}).get(key)


def _in_sync(obs: Observed, g: GroupRecord) -> bool:
    """Every member reports the role the record gives it, at the record's term."""
    for m in g.members:
        rep = _report(obs, m, g.key)
        if rep is None or rep.get("term") != g.term or rep.get("error"):
            return False
        want = Role.LEADER if m == g.leader else Role.FOLLOWER
        if rep.get("role") != want or (want == Role.FOLLOWER and rep.get("leader") != g.leader):
            return False
    return bool(g.members)


def member_errors(obs: Observed, g: GroupRecord) -> str:
    """The errors the members of ``g`` report (a workload that cannot be created or take its
    role), as one line, or ""."""
    found = []
    for m in g.members:
        rep = _report(obs, m, g.key)
        if rep is not None and rep.get("error"):
            found.append(f"member on {m}: {rep['error']}")
    return "; ".join(found)


def guard(obs: Observed, g: GroupRecord) -> tuple[bool, str]:
    """Whether the suspect leader of ``g`` may be deposed, and why (seed 001's false-positive
    guard): a majority of the other members must report no live stream from it."""
    leader = g.leader
    assert leader is not None
    view = obs.nodes.get(leader)
    lapsed = view is None or not view.live
    others = [m for m in g.members if m != leader]
    if not others:
        # Nobody to ask. A lapsed membership means the leader stopped itself (renew deadline
        # < ttl); a leader merely unreachable from here may still be serving.
        if lapsed:
            return True, f"leader {leader} lost its membership and the group has no other member"
        return False, f"leader {leader} unreachable from the controller; no member to confirm"
    no_stream = 0
    streaming = 0
    for m in others:
        mview = obs.nodes.get(m)
        if mview is None or not mview.live:
            no_stream += 1  # a member without membership has stopped, streams included
            continue
        rep = _report(obs, m, g.key)
        if rep is None:
            continue  # unreachable member: unknown, counts for neither side
        if rep.get("stream_live") and rep.get("leader") == leader:
            streaming += 1
        else:
            no_stream += 1
    why = "lost its membership" if lapsed else "is unreachable from the controller"
    if no_stream * 2 > len(others):
        return True, f"leader {leader} {why}; {no_stream} of {len(others)} members have no stream"
    return False, (
        f"leader {leader} {why} but only {no_stream} of {len(others)} members report no stream "
        f"({streaming} still stream from it): waiting"
    )


def best_member(
    obs: Observed, g: GroupRecord, candidates: list[str], leaders: Counter[str]
) -> tuple[str | None, dict[str, int]]:
    """The candidate with the highest reported commit index (ties: fewer leaderships, then
    node id), and the indices it was chosen from. Without any report (a new group), the
    candidate with the fewest leaderships."""
    indices: dict[str, int] = {}
    for m in candidates:
        rep = _report(obs, m, g.key)
        if (
            rep is not None
            and isinstance(rep.get("commit_index"), int)
            and rep["commit_index"] >= 0
        ):
            indices[m] = rep["commit_index"]
    pool = list(indices) or candidates
    if not pool:
        return None, indices
    chosen = min(pool, key=lambda m: (-indices.get(m, 0), leaders[m], m))
    return chosen, indices


def _suspect(obs: Observed, node: str) -> bool:
    view = obs.nodes.get(node)
    return view is None or not view.live or not view.reachable


def decide(obs: Observed) -> Decision:
    """The group records as they should be after this pass."""
    out = Decision()
    now, epoch = obs.now, obs.controller_epoch
    wanted: dict[str, GroupRecord] = {}
    for name in sorted(obs.objects):
        obj = obs.objects[name]
        for p in range(obj.partitions):
            key = group_key(name, p)
            current = obs.groups.get(key)
            if current is None or current.type != obj.type:
                current = GroupRecord(object=name, type=obj.type, partition=p)
            wanted[key] = current
    for key in obs.groups:
        if key not in wanted:
            out.groups[key] = None  # its object is gone

    # 0. A record behind what its members run: the store lost its latest writes (a failover to
    # a replica that had not received them, or its data lost). A member never goes back to a
    # lower term, so the group would wait for ever with its leader idle: a new term, above
    # every term a node reports for it, with the same leader and members.
    for key, g in wanted.items():
        seen = max(
            (
                int(rep.get("term") or 0)
                for reps in obs.reports.values()
                if (rep := reps.get(key)) is not None
            ),
            default=0,
        )
        if seen > g.term:
            wanted[key] = g.model_copy(update={"term": max(seen + 1, epoch)})
            out.behind.append(key)

    leaders: Counter[str] = Counter(g.leader for g in wanted.values() if g.leader)
    frozen: dict[str, GroupRecord] = {}
    # 1. Suspect leaders: depose (data-aware) or hold in failure reconciliation.
    for key, g in wanted.items():
        if g.leader is None or not _suspect(obs, g.leader):
            continue
        ok, detail = guard(obs, g)
        if not ok:
            frozen[key] = g.model_copy(update={"state": "failure", "detail": detail})
            out.failures.append(key)
            continue
        candidates = [m for m in g.members if m != g.leader and not _suspect(obs, m)]
        chosen, indices = best_member(obs, g, candidates, leaders)
        leaders[g.leader] -= 1
        if chosen is not None:
            leaders[chosen] += 1
        transfer = Transfer(
            previous=g.leader,
            chosen=chosen or "",
            reason=detail,
            commit_indices=indices,
            at=now,
        )
        wanted[key] = g.model_copy(
            update={
                "leader": chosen,
                "term": max(g.term + 1, epoch),
                "transfer": transfer,
            }
        )
        out.transfers.append(key)

    # 2. Members: placement over live, non-draining nodes. Groups in failure reconciliation
    # take part (so that balance counts them) but keep their members whatever the plan says.
    slots = [
        NodeSlot(
            id=v.id,
            capacity=v.capacity,
            labels={**v.labels, **{TYPE_LABEL + t: "yes" for t in v.types}},
        )
        for v in obs.nodes.values()
        if v.live and not v.draining
    ]
    demands = [
        GroupDemand(
            key=key,
            type=g.type,
            replicas=obs.objects[g.object].replicas,
            members=g.members,
            leader=g.leader,
            selector={**obs.objects[g.object].selector, TYPE_LABEL + g.type: "yes"},
        )
        for key, g in wanted.items()
    ]
    result = place(demands, slots)
    out.placement = result

    # 3. Leaders for groups without one, or whose leader placement moved away (planned).
    # Groups with the fewest members choose first, so a group that can only be led by one node
    # does not find it already loaded by groups that had a choice.
    order = sorted(wanted, key=lambda k: (len(result.members.get(k, ())), k))
    for key in order:
        g = wanted[key]
        if key in frozen:
            out.groups[key] = frozen[key]
            continue
        members = result.members.get(key, ())
        update: dict[str, Any] = {"members": members}
        if g.leader not in members:
            live = [m for m in members if not _suspect(obs, m)] or list(members)
            chosen, indices = best_member(obs, g, live, leaders)
            if g.leader is not None:
                leaders[g.leader] -= 1
            if chosen is not None:
                leaders[chosen] += 1
            update["leader"] = chosen
            if chosen != g.leader:
                update["term"] = max(g.term + 1, epoch)
                if g.leader is not None:
                    update["transfer"] = Transfer(
                        previous=g.leader,
                        chosen=chosen or "",
                        reason=f"{g.leader} is no longer a member",
                        commit_indices=indices,
                        at=now,
                    )
                    out.transfers.append(key)
        new = g.model_copy(update=update)
        missing = result.unplaced.get(key, 0)
        if missing:
            state, detail = "placing", f"{missing} member(s) cannot be placed: no eligible node"
        elif new.leader is None:
            state, detail = "placing", "no member to lead"
        elif _in_sync(obs, new):
            state, detail = "ok", ""
        elif errors := member_errors(obs, new):
            # Shown rather than "waiting": no pass will fix it until its cause is fixed.
            state, detail = "error", errors
            out.errors.append(key)
        else:
            state, detail = (
                (
                    "transferring"
                    if key in out.transfers or g.state == "transferring"
                    else "placing"
                ),
                "waiting for members to take their roles",
            )
        new = new.model_copy(update={"state": state, "detail": detail})
        if new != obs.groups.get(key):
            new = new.model_copy(update={"controller_epoch": epoch})
        out.groups[key] = new
    return out
