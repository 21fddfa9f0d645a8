"""The campaign's checker finds each kind of violation it claims to, from hand-made histories
and databases: a checker that passes everything would make every campaign green."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from baton.chaos import checker
from baton.chaos.disk import node_db


def frame(host: str, kind: str, epoch: int, offset: int, at: float | None = None) -> dict[str, Any]:
    return {
        "kind": "channel-frame",
        "host": host,
        "type": kind,
        "epoch": epoch,
        "offset": offset,
        "at": at if kind == "pub" else None,
    }


def clean_channel() -> list[dict[str, Any]]:
    """Two hosts, epoch 10 then epoch 20 (after a failover), one host recovering with since."""
    out: list[dict[str, Any]] = []
    for host in ("h1", "h2"):
        out.append(frame(host, "subscribed", 10, 0))
        out += [frame(host, "pub", 10, n, 100.0 + n) for n in (1, 2, 3)]
    out.append({"kind": "channel-disconnect", "host": "h2"})
    out.append(frame("h2", "subscribed", 10, 3))  # recovered from offset 3
    out += [frame("h2", "pub", 10, 4, 104.0)]
    for host in ("h1", "h2"):
        out.append(frame(host, "subscribed", 20, 0))
        out += [frame(host, "pub", 20, n, 110.0 + n) for n in (1, 2)]
    return out


def test_a_clean_channel_history_has_no_violation() -> None:
    violations, stats = checker.channels(clean_channel())
    assert violations == []
    assert stats["publications"] == 6
    assert stats["epochs"] == 2
    assert stats["reconnects"] == 1
    assert stats["repeats"] == 0


def test_two_upstreams_of_one_epoch_are_found() -> None:
    history = [*clean_channel(), frame("h2", "pub", 20, 3, 113.0), frame("h1", "pub", 20, 3, 113.5)]
    violations, _ = checker.channels(history)
    assert any("published twice" in v for v in violations)


def test_two_epochs_publishing_at_once_are_found() -> None:
    history = [*clean_channel(), frame("h1", "pub", 10, 5, 111.5)]
    violations, _ = checker.channels(history)
    assert any("published at once" in v for v in violations)


def test_a_stale_epoch_or_repeated_offset_sent_to_a_subscriber_is_found() -> None:
    stale = [*clean_channel(), frame("h1", "gap", 10, 9)]
    assert any("after epoch 20" in v for v in checker.channels(stale)[0])
    repeated = [*clean_channel(), frame("h2", "pub", 20, 2, 112.0)]
    violations, stats = checker.channels(repeated)
    assert any("again" in v for v in violations)
    assert stats["repeats"] == 1


@given(
    epochs=st.lists(st.integers(1, 5), min_size=1, max_size=4),
    hosts=st.sets(st.sampled_from(["h1", "h2", "h3"]), min_size=1),
    duplicate=st.integers(0, 1000),
)
def test_any_repeated_publication_is_found(
    epochs: list[int], hosts: set[str], duplicate: int
) -> None:
    """Epochs one after another, each with a few publications at every host: clean; the same
    history with any one publication delivered a second time: a violation."""
    history: list[dict[str, Any]] = []
    t = 0.0
    for e, count in enumerate(epochs, start=1):
        stamps = []
        for n in range(1, count + 1):
            t += 1.0
            stamps.append((n, t))
        for host in sorted(hosts):
            history.append(frame(host, "subscribed", e, 0))
            history += [frame(host, "pub", e, n, at) for n, at in stamps]
    assert checker.channels(history)[0] == []
    pubs = [i for i, r in enumerate(history) if r["type"] == "pub"]
    i = pubs[duplicate % len(pubs)]
    twice = [*history[: i + 1], dict(history[i]), *history[i + 1 :]]
    assert checker.channels(twice)[0] != []


def _db(path: Path, *statements: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    db = sqlite3.connect(path)
    for statement in statements:
        db.execute(statement)
    db.commit()
    db.close()
    return path


def _new_root(tmp_path: Path, rows: str, applied: str) -> Path:
    """The promoted root s2's database: its items, and its audit table with the times."""
    return _db(
        node_db(tmp_path, "s2"),
        "CREATE TABLE items (id INTEGER PRIMARY KEY, n INTEGER, writer TEXT)",
        "CREATE TABLE items_applied (id INTEGER, n INTEGER, op TEXT, at REAL)",
        rows,
        applied,
    )


def test_fencing_finds_a_stale_epoch_a_shared_epoch_and_a_lost_accepted_write(
    tmp_path: Path,
) -> None:
    resource = _db(
        tmp_path / "fenced.db",
        "CREATE TABLE writes (seq INTEGER, lease TEXT, epoch INTEGER, writer TEXT)",
        "INSERT INTO writes VALUES (1, 'a', 5, 'h1'), (2, 'a', 7, 'h2'), (3, 'a', 7, 'h2')",
    )
    accepted = [{"kind": "fenced", "seq": 2, "lease": "a", "epoch": 7, "writer": "h2"}]
    assert checker.fencing(resource, accepted) == []
    _db(resource, "INSERT INTO writes VALUES (4, 'a', 5, 'h1'), (5, 'a', 7, 'h3')")
    lost = [{"kind": "fenced", "seq": 9, "lease": "a", "epoch": 7, "writer": "h2"}]
    violations = checker.fencing(resource, accepted + lost)
    assert any("epoch 5 accepted at seq 4 after epoch 7" in v for v in violations)
    assert any("written by h2 and h3" in v for v in violations)
    assert any("seq 9" in v for v in violations)


def write(op: str, id_: int, n: int, t: float, state: str = "ok") -> dict[str, Any]:
    return {"kind": "write", "op": op, "id": id_, "n": n, "t": t, "state": state}


def test_writes_and_replication_find_lost_extra_and_different_rows(tmp_path: Path) -> None:
    schema = "CREATE TABLE items (id INTEGER PRIMARY KEY, n INTEGER, writer TEXT)"
    root = _db(node_db(tmp_path, "s1"), schema, "INSERT INTO items VALUES (1, 2, 'w'), (3, 1, 'w')")
    history = [
        write("insert", 1, 1, 1.0),
        write("update", 1, 2, 2.0),
        write("insert", 2, 1, 3.0),
        write("delete", 2, 1, 4.0),
        write("insert", 3, 1, 5.0),
        write("insert", 4, 1, 6.0, state="unknown"),  # not acknowledged: may or may not be there
    ]
    assert checker.writes(root, history) == []
    assert checker.writes(root, [*history, write("insert", 5, 1, 7.0)]) != []
    _db(node_db(tmp_path, "s3"), schema, "INSERT INTO items VALUES (1, 2, 'w'), (3, 1, 'w')")
    assert checker.replication(tmp_path, "s1", ["s3"]) == []
    _db(node_db(tmp_path, "s3"), "UPDATE items SET n = 9 WHERE id = 1")
    (violation,) = checker.replication(tmp_path, "s1", ["s3"])
    assert "1 different" in violation


def test_exactly_once_finds_a_row_version_applied_twice(tmp_path: Path) -> None:
    audit = "CREATE TABLE items_applied (id INTEGER, n INTEGER, op TEXT)"
    _db(node_db(tmp_path, "s3"), audit, "INSERT INTO items_applied VALUES (1, 1, 'I'), (1, 2, 'U')")
    assert checker.exactly_once(tmp_path, ["s3"]) == ([], {"s3": 2})
    _db(node_db(tmp_path, "s3"), "INSERT INTO items_applied VALUES (1, 2, 'U'), (1, 2, 'D')")
    _db(node_db(tmp_path, "s3"), "INSERT INTO items_applied VALUES (1, 2, 'D')")
    violations, applied = checker.exactly_once(tmp_path, ["s3"])
    assert applied == {"s3": 5}
    assert any("applied twice" in v for v in violations)
    assert any("deleted twice" in v for v in violations)


def test_leadership_and_settling_violations_are_found() -> None:
    one = [
        {"kind": "observe-controller", "id": "h1", "epoch": 3},
        {"kind": "observe-controller", "id": "h1", "epoch": 3},
        {"kind": "observe-group", "group": "s2/0", "term": 8, "leader": "h4"},
    ]
    assert checker.leadership(one) == []
    two = [*one, {"kind": "observe-group", "group": "s2/0", "term": 8, "leader": "h5"}]
    assert checker.leadership(two) == ["s2/0 term 8 had leaders ['h4', 'h5']"]
    rounds = [
        {"kind": "settle", "round": 1, "seconds": 12.5, "bound": 120},
        {"kind": "settle", "round": 2, "seconds": None, "bound": 120, "waited_for": "a leader"},
    ]
    violations, times = checker.settling(rounds)
    assert times == [12.5]
    assert violations == ["round 2 did not settle within 120 s (waiting for a leader)"]


def _saved(path: Path, *events: tuple[str, int, int | None]) -> Path:
    """A ``resurrect`` save file holding these (type, id, n) events of ``items``."""
    lines: list[str] = []
    for type_, id_, n in events:
        data = None if n is None else json.dumps({"id": id_, "n": n, "writer": "w"})
        key = json.dumps({"id": id_})
        event = {"ev_id": len(lines) + 1, "type": type_, "table": "items", "key": key}
        lines.append(json.dumps({**event, "data": data, "tick": None}))
    path.write_text("".join(line + "\n" for line in lines))
    return path


def test_writes_stranded_on_a_lost_root_are_the_saved_ones_and_never_also_applied(
    tmp_path: Path,
) -> None:
    """The root was lost at t=10 and s2 promoted: writes 3 and 4 never left s1 and were saved;
    after the loss the writer went on at s2."""
    history = [
        write("insert", 1, 0, 1.0),
        write("insert", 2, 0, 2.0),
        write("update", 1, 1, 3.0),  # stranded
        write("insert", 3, 0, 4.0),  # stranded
        write("update", 1, 1, 11.0),  # the writer again at s2: n 0 there, so 1 once more
        write("insert", 4, 0, 12.0),
        {"kind": "root-loss", "step": "lost", "root": "s1", "t": 10.0},
        {"kind": "root-loss", "step": "failover", "root": "s2", "t": 10.5},
    ]
    assert checker.root_loss(history) == ("s2", 10.0, 10.5)
    root = _new_root(
        tmp_path,
        "INSERT INTO items VALUES (1, 1, 'w'), (2, 0, 'w'), (4, 0, 'w')",
        "INSERT INTO items_applied VALUES (1, 0, 'I', 1.5), (2, 0, 'I', 2.5), (1, 1, 'U', 11.0)",
    )
    saved = _saved(tmp_path / "stranded.jsonl", ("U", 1, 1), ("I", 3, 0), ("I", -7, 0))
    stranded = checker.stranded_events(saved)
    assert stranded == [("update", 1, 1), ("insert", 3, 0)]  # the probe's row left out
    assert checker.writes(root, history, stranded, 10.0) == []
    assert checker.never_both(root, stranded, 10.5) == []
    # Not saved, and not in the set: an acknowledged write lost.
    (lost,) = checker.writes(root, history, stranded[:1], 10.0)
    assert "1 missing [3]" in lost
    # Saved but never acknowledged before the loss.
    extra = [*stranded, ("insert", 9, 0)]
    assert any("no write acknowledged" in v for v in checker.writes(root, history, extra, 10.0))
    # Saved, and the set had applied it before the loss: replaying the file applies it twice.
    _db(root, "INSERT INTO items_applied VALUES (3, 0, 'I', 4.5)")
    (both,) = checker.never_both(root, stranded, 10.5)
    assert "also applied" in both


def test_replication_tells_a_node_behind_from_one_that_diverged(tmp_path: Path) -> None:
    """A run that ends without settling leaves subscribers behind (run M6: the store lost every
    placed object, no worker ran): a subscriber holding exactly the root's rows of an earlier
    moment is reported as behind, with when; any other difference stays a divergence."""
    schema = "CREATE TABLE items (id INTEGER PRIMARY KEY, n INTEGER, writer TEXT)"
    audit = "CREATE TABLE items_applied (id INTEGER, n INTEGER, op TEXT, at REAL)"
    _db(
        node_db(tmp_path, "s2"), schema, audit,
        "INSERT INTO items VALUES (1, 2, 'w'), (3, 1, 'w')",
        "INSERT INTO items_applied VALUES (1, 1, 'I', 1.0), (2, 1, 'I', 2.0), (1, 2, 'U', 3.0),"
        " (2, 1, 'D', 4.0), (3, 1, 'I', 5.0)",
    )  # fmt: skip
    # s3 holds the root's rows as of its third version: 1 -> 2 and 2 -> 1.
    _db(node_db(tmp_path, "s3"), schema, "INSERT INTO items VALUES (1, 2, 'w'), (2, 1, 'w')")
    (behind,) = checker.replication(tmp_path, "s2", ["s3"])
    assert "behind, not diverged" in behind and "row version 3 of 5 (at 3.0)" in behind
    _db(node_db(tmp_path, "s3"), "UPDATE items SET n = 7 WHERE id = 2")  # never the root's
    (diverged,) = checker.replication(tmp_path, "s2", ["s3"])
    assert "behind" not in diverged and "1 missing" in diverged and "1 extra" in diverged


def test_in_sync_mode_an_acknowledged_write_stranded_or_never_held_is_found(
    tmp_path: Path,
) -> None:
    """Sync mode: the root was lost at t=10 and s2 promoted at t=11. Write 3 was committed at
    s1 but never confirmed (``unknown``), so it may be stranded; write 2 was acknowledged, so
    it must have reached s2. Row 5 was inserted and deleted in one batch at s2: neither
    version was ever a row there, and neither is lost."""
    history = [
        write("insert", 1, 0, 1.0),
        write("insert", 2, 0, 2.0),
        write("insert", 3, 0, 4.0, state="unknown"),
        write("insert", 5, 0, 5.0),
        write("delete", 5, 0, 5.5),
        write("insert", 4, 0, 12.0),
        {"kind": "campaign-sync", "k": 1, "t": 0.5},
    ]
    root = _new_root(
        tmp_path,
        "INSERT INTO items VALUES (1, 0, 'w'), (2, 0, 'w'), (4, 0, 'w')",
        "INSERT INTO items_applied VALUES (1, 0, 'I', 1.5), (2, 0, 'I', 2.5), (4, 0, 'I', 12)",
    )
    unconfirmed = [("insert", 3, 0)]
    assert checker.writes(root, history, unconfirmed, 10.0, sync=True) == []
    assert checker.acknowledged_held(root, history, 10.0, 11.0) == []
    # The acknowledged insert 2 among the saved events: lost with the root, though confirmed.
    violations = checker.writes(root, history, [("insert", 2, 0)], 10.0, sync=True)
    assert any("acknowledged writes were stranded" in v for v in violations)
    # Insert 2 applied at s2 only after the failover: it had not reached s2 in time.
    _db(root, "UPDATE items_applied SET at = 11.5 WHERE id = 2")
    (missing,) = checker.acknowledged_held(root, history, 10.0, 11.0)
    assert "1 acknowledged writes had not reached" in missing and "2" in missing


def test_each_root_loss_is_reported_with_its_kind_and_one_never_failed_over_is_found() -> None:
    history = [
        {"kind": "root-loss", "step": "start", "root": "s1", "host": "h3", "how": "freeze",
         "by": "nemesis", "t": 1.0},
        {"kind": "root-loss", "step": "lost", "root": "s1", "how": "freeze", "seconds": 4.2,
         "t": 5.2},
        {"kind": "root-loss", "step": "failover", "root": "s2", "t": 5.5},
    ]  # fmt: skip
    violations, losses = checker.root_losses(history)
    assert violations == []
    assert losses == [
        {"root": "s1", "host": "h3", "kind": "freeze", "by": "nemesis", "new_root": "s2",
         "failover_seconds": 4.2},
    ]  # fmt: skip
    stuck = [
        {"kind": "root-loss", "step": "start", "root": "s2", "host": "h1", "how": "kill",
         "by": "halfway", "t": 9.0},
        {"kind": "root-loss", "step": "no-failover", "root": "s2", "how": "kill", "t": 99.0},
    ]  # fmt: skip
    (violation,) = checker.root_losses(history + stuck)[0]
    assert "never failed it over" in violation
