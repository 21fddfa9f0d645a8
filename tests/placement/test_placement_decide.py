"""The controller's decision function: seed 001's false-positive guard, data-aware leader
choice, planned transfers, deletion, and fencing fields (pure, no servers)."""

from __future__ import annotations

from typing import Any

from baton.placement.decide import NodeView, Observed, decide
from baton.placement.records import GroupRecord, ObjectSpec

EPOCH = 1_000_000


def node(i: str, *, live: bool = True, reachable: bool = True, draining: bool = False) -> NodeView:
    return NodeView(i, f"{i}:1", 100, {}, frozenset({"counter"}), live, reachable, draining)


def rep(leader: str | None, *, role: str = "follower", term: int = 5, index: int = 0,
        live: bool = True) -> dict[str, Any]:  # fmt: skip
    return {"role": role, "term": term, "leader": leader, "commit_index": index,
            "stream_live": live, "error": ""}  # fmt: skip


def observed(
    group: GroupRecord | None,
    nodes: list[NodeView],
    reports: dict[str, dict[str, Any]],
    replicas: int = 3,
) -> Observed:
    obj = ObjectSpec(name="o", type="counter", partitions=1, replicas=replicas)
    return Observed(
        objects={"o": obj},
        groups={"o/0": group} if group else {},
        nodes={n.id: n for n in nodes},
        reports={n: {"o/0": r} for n, r in reports.items()},
        controller_epoch=EPOCH,
        now=100.0,
    )


G = GroupRecord(object="o", type="counter", partition=0, members=("a", "b", "c"), leader="a",
                term=5, state="ok")  # fmt: skip


def result(obs: Observed) -> GroupRecord:
    out = decide(obs).groups["o/0"]
    assert out is not None
    return out


def test_unreachable_leader_with_streaming_members_is_not_deposed() -> None:
    obs = observed(
        G,
        [node("a", reachable=False), node("b"), node("c")],
        {"b": rep("a", index=7), "c": rep("a", index=9)},
    )
    g = result(obs)
    assert (g.leader, g.term, g.state) == ("a", 5, "failure")
    assert "2 still stream" in g.detail
    assert g.members == ("a", "b", "c")  # a group in failure reconciliation is left alone


def test_one_streaming_member_of_two_blocks_deposition() -> None:
    obs = observed(
        G,
        [node("a", live=False), node("b"), node("c")],
        {"b": rep("a", live=False), "c": rep("a", live=True)},
    )
    assert result(obs).state == "failure"


def test_majority_without_stream_deposes_for_the_highest_commit_index() -> None:
    obs = observed(
        G,
        [node("a", live=False), node("b"), node("c"), node("d")],
        {"b": rep("a", index=7, live=False), "c": rep("a", index=9, live=False)},
    )
    g = result(obs)
    assert g.leader == "c" and g.term == EPOCH  # max(term + 1, controller epoch)
    assert g.transfer is not None and g.transfer.commit_indices == {"b": 7, "c": 9}
    assert g.transfer.previous == "a"
    assert "a" not in g.members and len(g.members) == 3 and "d" in g.members
    assert g.controller_epoch == EPOCH and g.state == "transferring"


def test_lapsed_member_counts_as_no_stream() -> None:
    # b's membership lapsed too; c alone says no stream: 2 of 2.
    obs = observed(
        G,
        [node("a", live=False), node("b", live=False), node("c"), node("d"), node("e")],
        {"c": rep("a", index=3, live=False)},
    )
    g = result(obs)
    assert g.leader == "c"


def test_single_member_group() -> None:
    single = G.model_copy(update={"members": ("a",)})
    lapsed = observed(single, [node("a", live=False), node("b")], {}, replicas=1)
    g = result(lapsed)
    assert g.leader == "b" and g.members == ("b",)
    unreachable = observed(single, [node("a", reachable=False), node("b")], {}, replicas=1)
    assert result(unreachable).state == "failure"


def test_new_groups_spread_leaders_and_deleted_objects_go() -> None:
    nodes = [node(x) for x in "abc"]
    objects = {
        f"o{i}": ObjectSpec(name=f"o{i}", type="counter", partitions=1, replicas=3)
        for i in range(3)
    }
    stale = GroupRecord(object="gone", type="counter", partition=0, members=("a",), leader="a")
    obs = Observed(objects, {"gone/0": stale}, {n.id: n for n in nodes}, {}, EPOCH, 1.0)
    out = decide(obs).groups
    assert out["gone/0"] is None
    leaders = sorted(g.leader for k, g in out.items() if g is not None and g.leader)
    assert leaders == ["a", "b", "c"]
    assert all(g.state == "placing" for g in out.values() if g is not None)


def test_in_sync_group_is_ok_and_unchanged() -> None:
    obs = observed(
        G,
        [node("a"), node("b"), node("c")],
        {"a": rep("a", role="leader"), "b": rep("a"), "c": rep("a")},
    )
    assert decide(obs).groups["o/0"] == G


def test_drained_leader_hands_over_to_the_most_advanced_member() -> None:
    obs = observed(
        G,
        [node("a", draining=True), node("b"), node("c"), node("d")],
        {"a": rep("a", role="leader", index=10), "b": rep("a", index=4), "c": rep("a", index=8)},
    )
    g = result(obs)
    assert g.leader == "c" and "a" not in g.members and g.term == EPOCH
    assert g.transfer is not None and g.transfer.reason == "a is no longer a member"


def test_groups_in_failure_still_count_for_balance() -> None:
    # Two groups led by the unreachable a, their member b still streaming: both frozen. They
    # must still count on a and b, or placement would pile the other groups onto a and b.
    nodes = [node("a", reachable=False), node("b"), node("c"), node("d")]
    objects = {
        n: ObjectSpec(name=n, type="counter", partitions=1, replicas=2)
        for n in ("o1", "o2", "p1", "p2")
    }

    def grp(name: str, members: tuple[str, str]) -> GroupRecord:
        return GroupRecord(object=name, type="counter", partition=0, members=members,
                           leader=members[0], term=5, state="ok")  # fmt: skip

    groups = {
        "o1/0": grp("o1", ("a", "b")),
        "o2/0": grp("o2", ("a", "b")),
        "p1/0": grp("p1", ("c", "d")),
        "p2/0": grp("p2", ("c", "d")),
    }
    reports = {
        "b": {"o1/0": rep("a", index=1), "o2/0": rep("a", index=1)},
        "c": {"p1/0": rep("c", role="leader"), "p2/0": rep("c", role="leader")},
        "d": {"p1/0": rep("c"), "p2/0": rep("c")},
    }
    obs = Observed(objects, groups, {n.id: n for n in nodes}, reports, EPOCH, 1.0)
    out = decide(obs)
    assert sorted(out.failures) == ["o1/0", "o2/0"]
    for key, g in out.groups.items():
        assert g is not None and g.members == groups[key].members, key


def test_a_member_that_cannot_run_shows_its_error() -> None:
    # b cannot start its workload (its spec, its constructor): the group says so, with where
    # and why, instead of waiting forever; nothing else about the group changes.
    why = "counter spec.interval: Input should be a valid number"
    obs = observed(
        G,
        [node("a"), node("b"), node("c")],
        {"a": rep("a", role="leader"), "b": {**rep(None, role="none", term=0), "error": why},
         "c": rep("a")},
    )  # fmt: skip
    out = decide(obs)
    g = out.groups["o/0"]
    assert g is not None and g.state == "error" and out.errors == ["o/0"]
    assert g.detail == f"member on b: {why}"
    assert (g.leader, g.term, g.members) == ("a", 5, ("a", "b", "c"))
    # Fixed (b reports its role): ok again.
    healed = observed(
        g, [node("a"), node("b"), node("c")],
        {"a": rep("a", role="leader"), "b": rep("a"), "c": rep("a")},
    )  # fmt: skip
    assert result(healed).state == "ok"


def test_a_record_behind_its_members_gets_a_term_above_theirs() -> None:
    """The store lost its latest writes (a replica promoted before it had them): the record
    is back at term 5, while its members ran term 9 and refuse any lower term. Without a new
    term the group would wait for ever, its leader idle."""
    obs = observed(
        G,
        [node("a"), node("b"), node("c")],
        {
            "a": rep(None, role="none", term=9),
            "b": rep("a", term=9, live=False),
            "c": rep("a", term=9, live=False),
        },
    )
    decision = decide(obs)
    g = decision.groups["o/0"]
    assert g is not None and g.term > 9 and g.term == EPOCH  # max(seen + 1, controller epoch)
    assert (g.leader, g.members) == ("a", ("a", "b", "c"))  # same leader, same members
    assert decision.behind == ["o/0"] and decision.transfers == []
    # A record in step with its members is left alone.
    same = decide(observed(G, [node("a"), node("b"), node("c")], {"a": rep("a", role="leader")}))
    assert same.behind == [] and same.groups["o/0"] is not None
    assert same.groups["o/0"].term == 5
