"""The sets the dashboard finds (:func:`baton.node.ui_sets.read_sets`), on real SQLite node
databases: a partition set whose only members besides its root are merge-leaves inside the
combined set's nodes is found through them."""

from __future__ import annotations

from pathlib import Path

from baton.cascade import merge, node_ops
from baton.cascade.db import open_node_db
from baton.cascade.model import Role
from baton.node.ui_sets import read_sets
from baton.testing.workload import create_accounts


def test_a_partition_set_is_found_through_the_merge_leaf_its_combined_root_hosts(
    tmp_path: Path,
) -> None:
    a1, s1, s2 = (f"sqlite://{tmp_path}/{n}.db" for n in ("a1", "s1", "s2"))
    for location in (a1, s1, s2):
        create_accounts(location)
    node_ops.create_root("a1", a1, "A")
    node_ops.create_root("s1", s1, "S")
    node_ops.create_subscriber(Role.LEAF, "s2", s2, "s1", s1)
    # Known: only S's leaf (the node an agent serves reports its reach; a root does not).
    assert [s["set"] for s in read_sets([], [s2])] == ["S"]
    with open_node_db(a1) as db, db.transaction() as cur:
        db.make_tick(cur)
    merge.create_merge_leaf("a2", s1, "a1", a1)
    sets = {s["set"]: s for s in read_sets([], [s2])}
    assert sorted(sets) == ["A", "S"]
    part = sets["A"]
    assert part["error"] is None
    assert part["root"] == "a1"
    assert {m["name"]: m["role"] for m in part["members"]} == {"a1": "root", "a2": "leaf"}
    assert part["via"] == merge.merge_location(s1, "A")
    assert [m["name"] for m in sets["S"]["members"]] == ["s1", "s2"]
