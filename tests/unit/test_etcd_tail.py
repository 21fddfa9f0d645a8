"""The etcd store's log tail (``baton.store.etcd_tail``): what watches delivered serves a
watcher only when nothing can be missing; anything doubtful sends it to read etcd."""

from __future__ import annotations

import json

from baton.store.etcd_gateway import b64
from baton.store.etcd_tail import KEEP, LogTail

LOG = "/baton/t/log/"


def entry(kind: str, name: str = "x") -> bytes:
    return json.dumps({"k": kind, "n": name}).encode()


def put(revision: int, kind: str = "put") -> dict[str, object]:
    return {"kv": {"key": b64(f"{LOG}{revision:020d}"), "value": b64(entry(kind))}}


def delete(revision: int) -> dict[str, object]:
    return {"type": "DELETE", "kv": {"key": b64(f"{LOG}{revision:020d}")}}


def covered(at: int = 10) -> LogTail:
    """A tail with one watch open and a complete read up to ``at``."""
    tail = LogTail()
    tail.opened()
    tail.read_complete("inc", at, tail.generation, live=True)
    return tail


def test_serves_entries_in_a_row_and_nothing_when_none_arrived() -> None:
    tail = covered()
    assert tail.after("inc", 10, 100) == []
    tail.events(LOG, [put(11), put(12, "acquired")])
    assert [r for r, _ in tail.after("inc", 10, 100) or []] == [11, 12]
    assert [r for r, _ in tail.after("inc", 11, 1) or []] == [12]
    assert tail.acquired_after("inc", 11) and not tail.acquired_after("inc", 12)


def test_doubt_sends_the_watcher_to_read() -> None:
    tail = covered()
    tail.events(LOG, [put(13)])  # 11 and 12 never arrived
    assert tail.after("inc", 10, 100) is None
    assert tail.after("inc", 9, 100) is None  # behind what the read covered
    assert tail.after("other", 10, 100) is None  # another incarnation
    assert tail.acquired_after("inc", 9)
    unread = LogTail()
    unread.opened()
    assert unread.after("inc", 10, 100) is None  # no complete read yet
    late = LogTail()
    late.read_complete("inc", 10, late.generation, live=False)  # no watch open during it
    late.opened()
    assert late.after("inc", 10, 100) is None


def test_resets_on_a_broken_watch_a_closed_one_or_a_recent_entry_deleted() -> None:
    def broken(t: LogTail) -> None:
        t.events(LOG, None)

    def recent_deleted(t: LogTail) -> None:
        t.events(LOG, [delete(11)])

    for spoil in (broken, LogTail.closed, recent_deleted):
        tail = covered()
        tail.events(LOG, [put(11)])
        spoil(tail)
        assert tail.after("inc", 10, 100) is None
    trimmed = covered()
    trimmed.events(LOG, [put(11), delete(3)])  # a trim of old entries changes nothing
    assert [r for r, _ in trimmed.after("inc", 10, 100) or []] == [11]


def test_keeps_the_newest_entries_only() -> None:
    tail = covered(0)
    tail.events(LOG, [put(r) for r in range(1, KEEP + 11)])
    assert tail.after("inc", 0, 10) is None  # the oldest were dropped
    assert [r for r, _ in tail.after("inc", KEEP + 5, 100) or []] == list(
        range(KEEP + 6, KEEP + 11)
    )


def acquired(revision: int, expiry: int | None, mod: int = 0) -> dict[str, object]:
    fields: dict[str, object] = {"k": "acquired", "n": "x"}
    if expiry is not None:
        fields["x"] = expiry
    value = json.dumps(fields).encode()
    key = b64(f"{LOG}{revision:020d}")
    return {"kv": {"key": key, "value": b64(value), "mod_revision": str(mod)}}


def test_acquisitions_tell_their_soonest_expiry() -> None:
    tail = covered()
    assert tail.acquired_expiries("inc", 10) == (10, None)  # nothing acquired
    tail.events(LOG, [acquired(11, 5_000), put(12), acquired(13, 3_000)])
    assert tail.acquired_expiries("inc", 10) == (13, 3_000)
    assert tail.acquired_expiries("inc", 11) == (13, 3_000)
    assert tail.acquired_expiries("inc", 13) == (13, None)
    assert tail.acquired_expiries("inc", 9) is None  # behind what the read covered
    assert tail.acquired_expiries("other", 10) is None
    tail.events(LOG, [acquired(14, None)])  # an entry without its expiry: cannot tell
    assert tail.acquired_expiries("inc", 13) is None


def test_acquisitions_dropped_from_the_tail_cannot_be_told() -> None:
    tail = covered(0)
    tail.events(LOG, [acquired(1, 7)] + [put(r) for r in range(2, KEEP + 3)])
    assert tail.acquired_expiries("inc", 0) is None
    assert tail.acquired_expiries("inc", 5) == (5, None)


def test_the_newest_entry_and_where_etcd_wrote_it() -> None:
    tail = covered()
    tail.events(LOG, [acquired(11, 1, mod=40), acquired(12, 1, mod=41)])
    assert tail.newest is not None and tail.newest[:2] == (12, 41)
    tail.events(LOG, [acquired(12, 1, mod=41)])  # the same entry from another watch
    assert tail.newest[:2] == (12, 41)
    assert tail.newest[2] == {"k": "acquired", "n": "x", "x": 1}
    tail.events(LOG, None)
    assert tail.newest is None
