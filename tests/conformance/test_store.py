"""One conformance suite for every store backend, against real servers (see conftest)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from baton.errors import ConfigError, FeedCompacted, StoreError
from baton.local.waiting import store_reachable
from baton.store import (
    Change,
    ChangeKind,
    Delete,
    LeaseHeld,
    Put,
    Store,
    VersionIs,
    open_store,
)
from baton.store.base import make_position, parse_position
from baton.testing import await_for, free_port
from tests.conftest import BACKENDS, Backend, make_backend


@pytest.fixture(params=(*BACKENDS, "etcd"))
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    """The suite's backends, and etcd: it runs this suite only, to keep the whole suite fast."""
    return make_backend(request, tmp_path)


async def next_changes(it: AsyncIterator[Change], n: int, timeout: float = 10.0) -> list[Change]:
    out: list[Change] = []
    async with asyncio.timeout(timeout):
        while len(out) < n:
            out.append(await anext(it))
    return out


async def wait_expired(store: Store, expires_at: float) -> None:
    await await_for(lambda: _after(store, expires_at), timeout=10, what="store clock past expiry")


async def _after(store: Store, t: float) -> bool:
    return await store.now() > t


# -- clock ---------------------------------------------------------------------------------


async def test_now_is_store_clock_and_moves(store: Store) -> None:
    a = await store.now()
    assert abs(a - time.time()) < 5
    b = await await_for(lambda: _after(store, a), what="clock to advance")
    assert b


# -- leases --------------------------------------------------------------------------------


async def test_acquire_gives_epoch_and_expiry(store: Store) -> None:
    before = await store.now()
    lease = await store.acquire("lead", "n1", 5)
    assert lease is not None
    assert (lease.name, lease.holder, lease.ttl) == ("lead", "n1", 5)
    assert lease.epoch > 0
    assert before + 4 < lease.expires_at < before + 7
    got = await store.get_lease("lead")
    assert got is not None and got.holder == "n1" and got.epoch == lease.epoch


async def test_double_acquire_refused_even_for_same_holder(store: Store) -> None:
    assert await store.acquire("lead", "n1", 5) is not None
    assert await store.acquire("lead", "n2", 5) is None
    assert await store.acquire("lead", "n1", 5) is None


async def test_concurrent_acquire_has_one_winner(backend: Backend) -> None:
    stores = [backend.open() for _ in range(5)]
    for s in stores:
        await s.connect()
    try:
        results = await asyncio.gather(*(s.acquire("x", f"n{i}", 5) for i, s in enumerate(stores)))
        assert sum(r is not None for r in results) == 1
    finally:
        for s in stores:
            await s.close()


async def test_renew_many_keeps_epochs_and_extends(store: Store) -> None:
    leases = [await store.acquire(f"l{i}", "n1", 2) for i in range(3)]
    assert all(lease is not None for lease in leases)
    held = [lease for lease in leases if lease is not None]
    other = await store.acquire("other", "n2", 2)
    assert other is not None
    await await_for(lambda: _after(store, held[0].expires_at - 1.5), what="some time to pass")
    renewed = await store.renew("n1", held)
    assert set(renewed) == {"l0", "l1", "l2"}
    for old in held:
        new = renewed[old.name]
        assert new is not None
        assert new.epoch == old.epoch
        assert new.expires_at > old.expires_at


async def test_renew_takes_the_ttl_it_is_given(store: Store) -> None:
    from dataclasses import replace

    lease = await store.acquire("t", "n1", 2)
    assert lease is not None
    renewed = (await store.renew("n1", [replace(lease, ttl=30)]))["t"]
    now = await store.now()
    assert renewed is not None and renewed.ttl == 30 and renewed.expires_at > now + 25
    got = await store.get_lease("t")
    assert got is not None and got.ttl == 30 and got.epoch == lease.epoch


async def test_renew_after_expiry_fails(store: Store) -> None:
    lease = await store.acquire("short", "n1", 0.2)
    assert lease is not None
    await wait_expired(store, lease.expires_at)
    assert (await store.renew("n1", [lease]))["short"] is None
    assert await store.get_lease("short") is None


async def test_renew_with_wrong_epoch_or_holder_batch(store: Store) -> None:
    lease = await store.acquire("a", "n1", 5)
    assert lease is not None
    from dataclasses import replace

    assert (await store.renew("n1", [replace(lease, epoch=lease.epoch - 1)]))["a"] is None
    with pytest.raises(ConfigError):
        await store.renew("n2", [lease])
    assert await store.renew("n1", []) == {}


async def test_release_by_non_holder_refused(store: Store) -> None:
    from dataclasses import replace

    lease = await store.acquire("lead", "n1", 5)
    assert lease is not None
    assert not await store.release(replace(lease, holder="n2"))
    assert not await store.release(replace(lease, epoch=lease.epoch + 1))
    still = await store.get_lease("lead")
    assert still is not None and still.holder == "n1"
    assert await store.release(lease)
    assert await store.get_lease("lead") is None
    assert not await store.release(lease)


async def test_epoch_strictly_increases_across_release_and_expiry(store: Store) -> None:
    epochs = []
    for i in range(3):
        lease = await store.acquire("lead", f"n{i}", 5)
        assert lease is not None
        epochs.append(lease.epoch)
        assert await store.release(lease)
    lease = await store.acquire("lead", "n9", 0.2)
    assert lease is not None
    epochs.append(lease.epoch)
    await wait_expired(store, lease.expires_at)
    lease = await store.acquire("lead", "n8", 5)
    assert lease is not None
    epochs.append(lease.epoch)
    assert epochs == sorted(epochs) and len(set(epochs)) == len(epochs)


async def test_epoch_increases_across_client_and_server_restart(backend: Backend) -> None:
    async with backend.open() as s:
        first = await s.acquire("lead", "n1", 30)
        assert first is not None
    # A server restart (Redis: without persistence, so every key is lost; SQLite: the file is
    # deleted) must not let an epoch repeat or go down.
    backend.restart()
    async with backend.open() as s:
        await await_for(lambda: store_reachable(s), timeout=20, what="store back after restart")
        if backend.name == "postgres":
            # PostgreSQL kept the lease: it is still held until it expires.
            assert await s.acquire("lead", "n2", 30) is None
            old = await s.get_lease("lead")
            assert old is not None and old.epoch == first.epoch
            assert await s.release(old)
        second = await s.acquire("lead", "n2", 30)
        assert second is not None
        assert second.epoch > first.epoch


async def test_list_leases_by_prefix(store: Store) -> None:
    for name in ("app/a", "app/b", "other"):
        assert await store.acquire(name, "n1", 5) is not None
    short = await store.acquire("app/c", "n1", 0.2)
    assert short is not None
    await wait_expired(store, short.expires_at)
    assert [lease.name for lease in await store.list_leases("app/")] == ["app/a", "app/b"]
    assert len(await store.list_leases()) == 3


async def test_lapses_say_when_a_lease_stopped_being_held(store: Store) -> None:
    short = await store.acquire("m/a", "n1", 0.2)
    gone = await store.acquire("m/b", "n2", 5)
    held = await store.acquire("m/c", "n3", 5)
    assert short is not None and gone is not None and held is not None
    before = await store.now()
    assert await store.release(gone, successor="n9")
    after = await store.now()
    await wait_expired(store, short.expires_at)
    names = ["m/a", "m/b", "m/c", "m/never"]
    # An expiry nobody logged yet is a lapse already, at the lease's expiry.
    lapses = await store.lapses(names)
    assert sorted(lapses) == ["m/a", "m/b"]
    assert (lapses["m/a"].at, lapses["m/a"].ttl) == (short.expires_at, 0.2)
    assert before <= lapses["m/b"].at <= after and lapses["m/b"].ttl == 5
    await store.expire_due()  # logged: the same lapse
    assert await store.lapses(names) == lapses
    assert await store.acquire("m/a", "n1", 5) is not None  # held again: no lapse
    assert list(await store.lapses(names)) == ["m/b"]
    assert await store.lapses([]) == {}


async def test_handover_reserves_lease_for_successor(store: Store) -> None:
    lease = await store.acquire("lead", "n1", 5)
    assert lease is not None
    assert await store.release(lease, successor="n2")
    assert await store.acquire("lead", "n3", 5) is None
    assert await store.acquire("lead", "n1", 5) is None
    new = await store.acquire("lead", "n2", 5)
    assert new is not None and new.epoch > lease.epoch


async def test_reservation_lapses_after_ttl(store: Store) -> None:
    lease = await store.acquire("lead", "n1", 0.2)
    assert lease is not None
    assert await store.release(lease, successor="ghost")
    released_at = await store.now()  # after: the reservation runs from the release itself
    assert await store.acquire("lead", "n3", 5) is None
    await wait_expired(store, released_at + 0.25)
    assert await store.acquire("lead", "n3", 5) is not None


async def test_bad_names_and_ttls_refused(store: Store) -> None:
    with pytest.raises(ConfigError):
        await store.acquire("", "n1", 5)
    with pytest.raises(ConfigError):
        await store.acquire("x", "", 5)
    with pytest.raises(ConfigError):
        await store.acquire("x", "n1", 0)
    with pytest.raises(ConfigError):
        await store.acquire("x", "n1", -1)
    assert await store.list_leases() == []


# -- records -------------------------------------------------------------------------------


async def test_put_get_versions_increase(store: Store) -> None:
    r1 = await store.put("k", b"v1")
    assert r1.ok and r1.revision is not None
    rec = await store.get("k")
    assert rec is not None and rec.value == b"v1" and rec.version == r1.revision
    r2 = await store.put("k", b"v2")
    assert r2.ok and r2.revision is not None and r2.revision > r1.revision
    rec2 = await store.get("k")
    assert rec2 is not None and rec2.value == b"v2" and rec2.version > rec.version
    assert await store.get("missing") is None


async def test_compare_and_set(store: Store) -> None:
    assert (await store.put("k", b"a", version=0)).ok
    assert not (await store.put("k", b"b", version=0)).ok
    rec = await store.get("k")
    assert rec is not None
    bad = await store.put("k", b"c", version=rec.version + 1)
    assert not bad.ok and bad.failed == (VersionIs("k", rec.version + 1),)
    assert (await store.put("k", b"d", version=rec.version)).ok
    after = await store.get("k")
    assert after is not None and after.value == b"d"
    assert not (await store.delete("k", version=rec.version)).ok
    assert (await store.delete("k", version=after.version)).ok
    assert await store.get("k") is None


async def test_multi_key_txn_is_atomic(store: Store) -> None:
    res = await store.txn([Put("a", b"1"), Put("b", b"2")])
    assert res.ok
    a = await store.get("a")
    b = await store.get("b")
    assert a is not None and b is not None and a.version < b.version == res.revision
    failed = await store.txn(
        [Put("a", b"x"), Delete("b"), Put("c", b"3")],
        [VersionIs("a", a.version), VersionIs("b", b.version + 100)],
    )
    assert not failed.ok and failed.revision is None
    assert failed.failed == (VersionIs("b", b.version + 100),)
    records, _ = await store.list()
    assert [(r.key, r.value) for r in records] == [("a", b"1"), ("b", b"2")]
    ok = await store.txn([Put("a", b"x"), Delete("b"), Put("c", b"3")], [VersionIs("c", 0)])
    assert ok.ok
    records, _ = await store.list()
    assert [(r.key, r.value) for r in records] == [("a", b"x"), ("c", b"3")]


async def test_bad_transactions_refused(store: Store) -> None:
    with pytest.raises(ConfigError):
        await store.txn([])
    with pytest.raises(ConfigError):
        await store.txn([Put("a", b"1"), Put("a", b"2")])
    with pytest.raises(ConfigError):
        await store.txn([Put("a", "text")])  # type: ignore[arg-type]
    assert (await store.list())[0] == []


async def test_conditioned_write_follows_the_lease(store: Store) -> None:
    lease = await store.acquire("lead", "n1", 0.3)
    assert lease is not None
    assert (await store.put("state", b"1", lease=lease)).ok
    wrong = LeaseHeld("lead", "n1", lease.epoch - 1)
    res = await store.txn([Put("state", b"2")], [wrong])
    assert not res.ok and res.failed == (wrong,)
    await wait_expired(store, lease.expires_at)
    # Expired but nobody else took it: the write must still be refused.
    assert not (await store.put("state", b"3", lease=lease)).ok
    new = await store.acquire("lead", "n2", 5)
    assert new is not None
    assert not (await store.put("state", b"4", lease=lease)).ok
    assert (await store.put("state", b"5", lease=new)).ok
    rec = await store.get("state")
    assert rec is not None and rec.value == b"5"
    assert await store.release(new)
    assert not (await store.put("state", b"6", lease=new)).ok


async def test_list_by_prefix_with_position(store: Store) -> None:
    await store.txn([Put("p/1", b"a"), Put("p/2", b"b"), Put("q/1", b"c")])
    records, position = await store.list("p/")
    assert [r.key for r in records] == ["p/1", "p/2"]
    _, rev = parse_position(position)
    assert rev >= records[0].version


# -- change feed ---------------------------------------------------------------------------


async def test_watch_sees_every_change_in_order(store: Store) -> None:
    feed = store.watch("job/", since=await store.head())
    await store.put("job/a", b"1")
    await store.put("other", b"x")
    lease = await store.acquire("job/lead", "n1", 5)
    assert lease is not None
    await store.release(lease, successor="n2")
    await store.delete("job/a")
    await store.delete("job/never-existed")
    got = await next_changes(feed, 4)
    assert [(c.kind, c.key) for c in got] == [
        (ChangeKind.PUT, "job/a"),
        (ChangeKind.ACQUIRED, "job/lead"),
        (ChangeKind.RELEASED, "job/lead"),
        (ChangeKind.DELETE, "job/a"),
    ]
    assert got[0].value == b"1" and got[0].version is not None
    assert got[1].holder == "n1" and got[1].epoch == lease.epoch
    assert got[2].holder == "n1" and got[2].successor == "n2"
    revs = [c.revision for c in got]
    assert revs == sorted(revs) and len(set(revs)) == 4
    assert [parse_position(c.position)[1] for c in got] == revs
    await feed.aclose()


async def test_watch_reports_lease_expiry(store: Store) -> None:
    start = await store.head()
    lease = await store.acquire("lead", "n1", 0.3)
    assert lease is not None
    feed = store.watch("lead", since=start)
    got = await next_changes(feed, 2)
    assert [(c.kind, c.holder, c.epoch) for c in got] == [
        (ChangeKind.ACQUIRED, "n1", lease.epoch),
        (ChangeKind.EXPIRED, "n1", lease.epoch),
    ]
    await feed.aclose()


async def test_expired_is_logged_before_the_takeover(store: Store) -> None:
    start = await store.head()
    lease = await store.acquire("lead", "n1", 0.2)
    assert lease is not None
    await wait_expired(store, lease.expires_at)
    new = await store.acquire("lead", "n2", 5)
    assert new is not None
    feed = store.watch("lead", since=start)
    got = await next_changes(feed, 3)
    assert [(c.kind, c.holder) for c in got] == [
        (ChangeKind.ACQUIRED, "n1"),
        (ChangeKind.EXPIRED, "n1"),
        (ChangeKind.ACQUIRED, "n2"),
    ]
    await feed.aclose()


async def test_feed_resumes_after_disconnect(backend: Backend) -> None:
    async with backend.open() as s:
        start = await s.head()
        for i in range(5):
            await s.put(f"r/{i}", str(i).encode())
        feed = s.watch("r/", since=start)
        seen = await next_changes(feed, 2)
        await feed.aclose()
    resume = seen[-1].position
    async with backend.open() as s2:
        await s2.put("r/5", b"5")
        feed2 = s2.watch("r/", since=resume)
        rest = await next_changes(feed2, 4)
        await feed2.aclose()
    assert [c.key for c in seen + rest] == [f"r/{i}" for i in range(6)]


async def test_feed_position_of_another_store_is_compacted(store: Store) -> None:
    await store.put("a", b"1")
    feed = store.watch("", since=make_position("not-this-store", 1))
    with pytest.raises(FeedCompacted):
        await next_changes(feed, 1)
    with pytest.raises(ConfigError):
        await next_changes(store.watch("", since="garbage"), 1)


async def test_watch_wakes_promptly(store: Store) -> None:
    """A watcher learns of a change well inside the idle recheck (it is woken, not polling)."""
    feed = store.watch("w")
    waiter = asyncio.ensure_future(anext(feed))
    await asyncio.sleep(0.3)  # the watcher is now waiting for a notification
    t0 = time.monotonic()
    await store.put("w", b"1")
    change = await asyncio.wait_for(waiter, 5)
    assert change.key == "w"
    # Not a timing target: just proof that it did not wait for the 1 s idle recheck.
    assert time.monotonic() - t0 < 0.9
    await feed.aclose()


# -- failures ------------------------------------------------------------------------------


async def test_unreachable_server_is_a_store_error(backend: Backend) -> None:
    if backend.name == "sqlite":
        bad = open_store("sqlite:///nonexistent-dir/for/sure/x.db")
    elif backend.name == "redis":
        bad = open_store(f"redis://127.0.0.1:{free_port()}/0")
    elif backend.name == "etcd":
        bad = open_store(f"etcd://127.0.0.1:{free_port()}/baton")
    else:
        bad = open_store(f"postgresql://postgres@127.0.0.1:{free_port()}/postgres")
    with pytest.raises(StoreError):
        async with asyncio.timeout(15):
            await bad.connect()
            await bad.acquire("x", "n1", 5)
    await bad.close()


def test_bad_urls_are_config_errors() -> None:
    for url in ("", "mysql://x", "sqlite://", "nonsense", "redis://h:1/0?namespace=Bad-Name"):
        with pytest.raises(ConfigError):
            open_store(url)


def test_password_never_in_url_attribute() -> None:
    s = open_store("redis://:hunter2@127.0.0.1:1/0")
    assert "hunter2" not in s.url
    p = open_store("postgresql://u:hunter2@127.0.0.1:1/db")
    assert "hunter2" not in p.url
