"""A failover fences every node receiving from the dead root before it reads how far they got.
A node it cannot reach then (its database cannot be opened for a moment) is tried again, and
the new root caught up to it if it got further meanwhile; one it never reaches is named in the
notes, still receiving from the dead root, never taken for fenced. In-process, no Spark: S1 the
root, S2 and S3 its branches, S3 with an audit trigger."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from baton.cascade import decide, node_ops, set_ops, takeover
from baton.cascade.db import open_node_db
from baton.cascade.model import Role
from baton.testing.workload import create_accounts
from tests.cascade.test_merge import audit, audited, pump, rows, tick, write


def build(tmp_path: Path) -> dict[str, str]:
    """S1 -> S2, S1 -> S3, in sync at S1's tick T-1; S1's last tick T applied by neither."""
    loc = {n: f"sqlite://{tmp_path}/{n}.db" for n in ("s1", "s2", "s3")}
    for location in loc.values():
        create_accounts(location)
    audit(loc["s3"])
    node_ops.create_root("s1", loc["s1"], "S")
    node_ops.add_table(loc["s1"], "accounts")
    for node in ("s2", "s3"):
        node_ops.create_subscriber(Role.BRANCH, node, loc[node], "s1", loc["s1"])
        node_ops.add_table(loc[node], "accounts")
    write(loc["s1"], {1: 10, 2: 20})
    tick(loc["s1"])
    for node in ("s2", "s3"):
        pump(loc[node])
    write(loc["s1"], {1: 11, 3: 30})
    tick(loc["s1"])
    return loc


class Away:
    """S3's database files moved aside: opening S3 finds no node there (as when its database
    cannot be reached) until :meth:`back`."""

    def __init__(self, tmp_path: Path) -> None:
        self.home = tmp_path
        self.aside = tmp_path / "aside"
        self.aside.mkdir()
        for f in tmp_path.glob("s3.db*"):
            shutil.move(f, self.aside / f.name)

    def back(self) -> None:
        for f in self.home.glob("s3.db*"):  # what opening it meanwhile made: no node
            f.unlink()
        for f in self.aside.iterdir():
            shutil.move(f, self.home / f.name)


def last_tick(location: str) -> int:
    with open_node_db(location) as db:
        last = db.last_tick()
    assert last is not None
    return last.tick_id


def test_a_node_the_fence_missed_is_fenced_again_and_caught_up_to(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """S3 cannot be reached when the failover fences, comes back while it catches up, and
    applies S1's last tick then (it still receives from S1). The failover fences it again and
    brings S2 up to it: S3 is not rewound, and no row version is applied twice."""
    loc = build(tmp_path)
    away = Away(tmp_path)
    real_furthest = decide.furthest
    calls: list[str | None] = []

    def back_and_applying(seen: dict[str, decide.Seen], dead_root: str) -> str | None:
        found = real_furthest(seen, dead_root)
        if not calls:
            away.back()
            assert pump(loc["s3"]).applied  # S1's last tick, from the dead root
        calls.append(found)
        return found

    monkeypatch.setattr(decide, "furthest", back_and_applying)
    c = set_ops.CascadeSet(loc["s2"])
    new_root, fork, notes = takeover.failover(c, "s1")
    assert calls == ["s2", "s3"]  # the second look, after fencing S3, found it further
    assert (new_root, fork, notes) == ("s2", last_tick(loc["s1"]), [])
    with open_node_db(loc["s3"]) as db:
        assert (db.state().provider, db.state().position) == ("s2", fork)
    write(loc["s2"], {4: 40})
    tick(loc["s2"])
    pump(loc["s3"])
    assert rows(loc["s3"]) == rows(loc["s2"]) == [(1, 11), (2, 20), (3, 30), (4, 40)]
    seen = audited(loc["s3"])
    assert len(seen) == len(set(seen)), seen


def test_a_node_never_fenced_is_named_in_the_notes(tmp_path: Path) -> None:
    """S3 cannot be reached during the whole failover: the notes say it was not fenced and may
    still apply S1's batches, and it indeed still receives from S1 until moved."""
    loc = build(tmp_path)
    away = Away(tmp_path)
    c = set_ops.CascadeSet(loc["s2"])
    new_root, fork, notes = takeover.failover(c, "s1")
    away.back()
    assert (new_root, fork) == ("s2", last_tick(loc["s2"]))
    [note] = notes
    assert note.startswith("s3: not fenced, it may still apply s1's batches")
    assert "change-provider s3 s2" in note
    with open_node_db(loc["s3"]) as db:
        assert db.state().provider == "s1"
    # What the note says to do.
    set_ops.change_provider(set_ops.CascadeSet(loc["s2"]), "s3", "s2")
    write(loc["s2"], {4: 40})
    tick(loc["s2"])
    assert pump(loc["s3"]).applied
    assert rows(loc["s3"]) == rows(loc["s2"])
