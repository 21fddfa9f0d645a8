"""What only the Redis store promises, or does in its own way: surviving data loss (FLUSHALL, a
restart without persistence), log trimming, positions from a store that went back in time, one
round trip for a renewal of thousands of leases, batched expiry, one ``expired`` change among
many watchers, a deadline on a hung server, and secrets kept out of error messages.

Tests that wipe or pause the server use a private one, never the session's."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import replace
from pathlib import Path

import pytest
import redis

from baton.errors import FeedCompacted, StoreError, StoreTimeout, StoreUnavailable
from baton.local.waiting import store_reachable
from baton.store import ChangeKind, Put, open_store
from baton.store.base import make_position, parse_position
from baton.store.redis import RedisStore
from baton.testing import await_for, free_port
from baton.testing.servers import RedisServer
from tests.conformance.test_store import next_changes, wait_expired


@pytest.fixture(scope="module")
def private_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """A server of this module's own: these tests flush, restart and pause it."""
    with RedisServer(tmp_path_factory.mktemp("redis-private")) as server:
        yield server


@pytest.fixture
def namespace() -> str:
    return "t" + uuid.uuid4().hex[:12]


def _url(server: RedisServer, namespace: str) -> str:
    return f"{server.url}?namespace={namespace}"


@pytest.fixture
async def store(private_redis: RedisServer, namespace: str) -> AsyncIterator[RedisStore]:
    s = open_store(_url(private_redis, namespace))
    assert isinstance(s, RedisStore)
    async with s:
        yield s


def _admin(server: RedisServer) -> redis.Redis:
    return redis.Redis(host="127.0.0.1", port=server.port)


# -- data loss -------------------------------------------------------------------------------


async def test_flushall_then_acquire_gives_a_greater_epoch(
    store: RedisStore, private_redis: RedisServer
) -> None:
    first = await store.acquire("lead", "n1", 30)
    assert first is not None
    _admin(private_redis).flushall()
    # Every key is gone, the last epoch included: only the clock term keeps epochs increasing.
    assert await store.get_lease("lead") is None
    second = await store.acquire("lead", "n2", 30)
    assert second is not None and second.epoch > first.epoch


async def test_position_from_before_flushall_is_compacted(
    store: RedisStore, private_redis: RedisServer
) -> None:
    await store.put("k", b"1")
    before = await store.head()
    _admin(private_redis).flushall()
    await store.put("k", b"2")
    await store.put("k", b"3")
    feed = store.watch("", since=before)
    with pytest.raises(FeedCompacted):
        await next_changes(feed, 1)
    # The way out the error names: re-list, then watch from the position list() gives.
    records, position = await store.list()
    assert [(r.key, r.value) for r in records] == [("k", b"3")]
    assert parse_position(position)[0] != parse_position(before)[0]
    feed = store.watch("", since=position)
    await store.put("k", b"4")
    (change,) = await next_changes(feed, 1)
    assert change.value == b"4"
    await feed.aclose()


async def test_watcher_across_a_restart_without_persistence(
    private_redis: RedisServer, namespace: str
) -> None:
    async with open_store(_url(private_redis, namespace)) as s:
        await s.put("k", b"1")
        since = await s.head()
        private_redis.restart()
        # The same client carries on once the server is back (pooled connections reconnect),
        # and a position from before the restart is refused rather than silently resumed.
        await await_for(lambda: store_reachable(s), timeout=20, what="store back after restart")
        await s.put("k", b"2")
        with pytest.raises(FeedCompacted):
            await next_changes(s.watch("", since=since), 1)


async def test_position_ahead_of_the_store_is_compacted(store: RedisStore) -> None:
    # A failover to a replica that missed the newest writes hands out revisions again that a
    # watcher may already have seen: a position beyond the store's head must not resume.
    await store.put("k", b"1")
    incarnation, revision = parse_position(await store.head())
    ahead = make_position(incarnation, revision + 5)
    with pytest.raises(FeedCompacted):
        await next_changes(store.watch("", since=ahead), 1)


# -- the change log ----------------------------------------------------------------------------


async def test_trimmed_log_is_compacted(private_redis: RedisServer, namespace: str) -> None:
    async with RedisStore(private_redis.url, namespace=namespace, log_limit=10) as s:
        start = await s.head()
        for i in range(0, 400, 50):
            await s.txn([Put(f"k{j}", b"x") for j in range(i, i + 50)])
        with pytest.raises(FeedCompacted):
            await next_changes(s.watch("", since=start), 1)
        # Recent positions are still served, in order, without a gap.
        incarnation, head = parse_position(await s.head())
        recent = make_position(incarnation, head - 5)
        got = await next_changes(s.watch("", since=recent), 5)
        assert [c.revision for c in got] == list(range(head - 4, head + 1))


async def test_each_change_of_a_transaction_has_its_own_position(store: RedisStore) -> None:
    start = await store.head()
    res = await store.txn([Put("a", b"1"), Put("b", b"2"), Put("c", b"3")])
    assert res.ok and res.revision is not None
    got = await next_changes(store.watch("", since=start), 3)
    assert [c.key for c in got] == ["a", "b", "c"]
    assert got[-1].revision == res.revision
    # Resuming from the middle of the transaction gives exactly the rest of it.
    rest = await next_changes(store.watch("", since=got[0].position), 2)
    assert [c.key for c in rest] == ["b", "c"]


async def test_read_limit_is_respected_and_resumable(store: RedisStore) -> None:
    start = await store.head()
    await store.txn([Put(f"k{i:02}", b"x") for i in range(25)])
    incarnation, revision = parse_position(start)
    seen: list[str] = []
    while len(seen) < 25:
        changes, revision = await store._changes_after(incarnation, revision, "", 10)
        assert len(changes) <= 10
        seen += [c.key for c in changes]
    assert seen == [f"k{i:02}" for i in range(25)]


# -- leases ------------------------------------------------------------------------------------


async def test_renewing_thousands_of_leases_is_one_round_trip(
    store: RedisStore, private_redis: RedisServer
) -> None:
    n = 3000
    leases = []
    for start in range(0, n, 500):
        got = await asyncio.gather(
            *(store.acquire(f"l{i}", "n1", 30) for i in range(start, start + 500))
        )
        leases += [lease for lease in got if lease is not None]
    assert len(leases) == n
    stale = replace(leases[7], epoch=leases[7].epoch - 1)
    batch = [*leases[:7], stale, *leases[8:]]
    await store.renew("n1", leases[:1])  # loads the script, should the server not have it
    admin = _admin(private_redis)
    admin.config_resetstat()
    renewed = await store.renew("n1", batch)
    calls = admin.info("commandstats").get("cmdstat_evalsha", {}).get("calls")
    assert calls == 1
    assert renewed["l7"] is None
    assert sum(lease is not None for lease in renewed.values()) == n - 1
    for old in leases[:7]:
        new = renewed[old.name]
        assert new is not None and new.epoch == old.epoch and new.expires_at >= old.expires_at


async def test_renewal_ttl_becomes_the_lease_ttl(store: RedisStore) -> None:
    lease = await store.acquire("lead", "n1", 5)
    assert lease is not None
    renewed = (await store.renew("n1", [replace(lease, ttl=30)]))["lead"]
    assert renewed is not None and renewed.ttl == 30 and renewed.epoch == lease.epoch
    now = await store.now()
    assert now + 25 < renewed.expires_at <= now + 30
    held = await store.get_lease("lead")
    assert held is not None and held.ttl == 30 and held.expires_at == renewed.expires_at
    listed = await store.list_leases()
    assert [(x.name, x.ttl) for x in listed] == [("lead", 30)]
    # The same name twice: the last one given is the one renewed and answered.
    twice = await store.renew("n1", [replace(renewed, ttl=7), replace(renewed, ttl=9)])
    assert list(twice) == ["lead"]
    again = twice["lead"]
    assert again is not None and again.ttl == 9


async def test_expiry_is_logged_in_batches(store: RedisStore) -> None:
    store._expire_batch = 3
    start = await store.head()
    leases = [await store.acquire(f"e{i}", "n1", 0.2) for i in range(7)]
    assert all(lease is not None for lease in leases)
    keep = await store.acquire("keep", "n1", 30)
    assert keep is not None
    await wait_expired(store, max(lease.expires_at for lease in leases if lease is not None))
    assert await store.expire_due() == 0  # more are due: call again at once
    assert await store.expire_due() == 0
    due = await store.expire_due()
    assert due is not None and 20 < due <= 30  # the next expiry is the lease kept
    got = await next_changes(store.watch("e", since=start), 14)
    assert sorted(c.key for c in got if c.kind is ChangeKind.EXPIRED) == [f"e{i}" for i in range(7)]


async def test_many_watchers_log_one_expiry(
    private_redis: RedisServer, namespace: str, store: RedisStore
) -> None:
    start = await store.head()
    lease = await store.acquire("lead", "n1", 0.3)
    assert lease is not None
    others = [open_store(_url(private_redis, namespace)) for _ in range(4)]
    for s in others:
        await s.connect()
    try:
        feeds = [s.watch("lead", since=start) for s in others]
        for feed in feeds:
            got = await next_changes(feed, 2)
            assert [c.kind for c in got] == [ChangeKind.ACQUIRED, ChangeKind.EXPIRED]
        # Every watcher drove expiry; the log still has one expired change.
        await store.put("lead-marker", b"")
        everything = await next_changes(store.watch("lead", since=start), 3)
        assert [c.kind for c in everything] == [
            ChangeKind.ACQUIRED,
            ChangeKind.EXPIRED,
            ChangeKind.PUT,
        ]
        for feed in feeds:
            await feed.aclose()
    finally:
        for s in others:
            await s.close()


async def test_reservation_is_not_kept_by_a_redis_key_ttl(store: RedisStore) -> None:
    # The handover key has a TTL only to collect it; the reservation itself ends on the store
    # clock, exactly one ttl after the release.
    lease = await store.acquire("lead", "n1", 0.2)
    assert lease is not None
    released_at = await store.now()
    assert await store.release(lease, successor="n2")
    assert await store.acquire("lead", "n3", 5) is None
    await wait_expired(store, released_at + 0.25)
    taken = await store.acquire("lead", "n3", 5)
    assert taken is not None and taken.epoch > lease.epoch


# -- concurrency and failures ----------------------------------------------------------------


async def test_more_concurrent_requests_than_connections(store: RedisStore) -> None:
    await store.put("k", b"v")
    got = await asyncio.gather(*(store.get("k") for _ in range(500)))
    assert all(r is not None and r.value == b"v" for r in got)


async def test_cancelled_watcher_stops_at_once(store: RedisStore) -> None:
    for _ in range(20):
        feed = store.watch("w")
        task = asyncio.ensure_future(anext(feed))
        await await_for(lambda: store_reachable(store), what="a round trip while the watcher waits")
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            async with asyncio.timeout(2):
                await task
        await feed.aclose()


async def test_hung_server_is_a_store_timeout(private_redis: RedisServer, namespace: str) -> None:
    async with open_store(_url(private_redis, namespace)) as s:
        await s.put("k", b"1")
        private_redis.pause()
        try:
            with pytest.raises(StoreTimeout):
                async with asyncio.timeout(20):
                    await s.get("k")
        finally:
            private_redis.resume()
        await await_for(lambda: store_reachable(s), timeout=20, what="store answers after resume")


async def test_not_connected_is_store_unavailable(private_redis: RedisServer) -> None:
    s = open_store(private_redis.url)
    with pytest.raises(StoreUnavailable, match="not connected"):
        await s.get("k")
    async with s:
        assert await s.get("k") is None
    with pytest.raises(StoreUnavailable):
        await s.get("k")


async def test_password_never_in_error_messages(private_redis: RedisServer, tmp_path: Path) -> None:
    # Nothing listens there.
    nowhere = open_store(f"redis://:hunter2@127.0.0.1:{free_port()}/0")
    with pytest.raises(StoreError) as refused:
        await nowhere.connect()
    assert "hunter2" not in str(refused.value) and "hunter2" not in repr(refused.value)
    # The server has no password: AUTH fails.
    wrong = open_store(f"redis://user:hunter2@127.0.0.1:{private_redis.port}/0")
    with pytest.raises(StoreError) as rejected:
        await wrong.connect()
    assert "hunter2" not in str(rejected.value)
    assert "hunter2" not in wrong.url
