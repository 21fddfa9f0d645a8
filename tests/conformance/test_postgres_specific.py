"""What only the PostgreSQL store promises, or does in its own way: concurrent schema creation,
revisions visible in commit order, one ``expired`` change among many watchers, log trimming,
reconnection after a server restart, a deadline on a hung server, a dropped namespace."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import replace

import psycopg
import pytest

from baton.errors import FeedCompacted, StoreTimeout, StoreUnavailable
from baton.local.waiting import store_reachable
from baton.store import ChangeKind, Delete, Put, Store, open_store
from baton.store.base import make_position, parse_position
from baton.store.postgres import PostgresStore
from baton.testing import await_for, free_port
from baton.testing.servers import PostgresServer
from tests.conformance.test_store import next_changes, wait_expired


def _url(pg: PostgresServer, namespace: str) -> str:
    return f"{pg.url}?namespace={namespace}"


@pytest.fixture
def namespace() -> str:
    return "t" + uuid.uuid4().hex[:12]


@pytest.fixture
async def pg_store(postgres_server: PostgresServer, namespace: str) -> AsyncIterator[PostgresStore]:
    store = open_store(_url(postgres_server, namespace))
    assert isinstance(store, PostgresStore)
    async with store:
        yield store


async def _backend_pids(pg: PostgresServer, application_name: str) -> list[int]:
    async with await psycopg.AsyncConnection.connect(pg.url, autocommit=True) as admin:
        cur = await admin.execute(
            "SELECT pid FROM pg_stat_activity WHERE application_name = %s", [application_name]
        )
        return [int(pid) for (pid,) in await cur.fetchall()]


@contextlib.contextmanager
def _stopped(pids: list[int]) -> Iterator[None]:
    """Freeze server processes (SIGSTOP): they keep their sockets open but answer nothing."""
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)


async def test_concurrent_schema_creation_is_safe(
    postgres_server: PostgresServer, namespace: str
) -> None:
    stores = [open_store(_url(postgres_server, namespace)) for _ in range(8)]
    try:
        await asyncio.gather(*(s.connect() for s in stores))
        heads = await asyncio.gather(*(s.head() for s in stores))
        # One schema, made once: every store sees the same incarnation.
        assert len({parse_position(h)[0] for h in heads}) == 1
    finally:
        for s in stores:
            await s.close()


async def test_multi_op_txn_takes_consecutive_revisions(pg_store: PostgresStore) -> None:
    await pg_store.put("k/old", b"0")
    start = await pg_store.head()
    res = await pg_store.txn(
        [Put("k/a", b"1"), Delete("k/missing"), Put("k/b", b"2"), Delete("k/old")]
    )
    assert res.ok and res.revision is not None
    feed = pg_store.watch("k/", since=start)
    got = await next_changes(feed, 3)
    await feed.aclose()
    first = parse_position(start)[1]
    assert [(c.kind, c.key, c.revision) for c in got] == [
        (ChangeKind.PUT, "k/a", first + 1),
        (ChangeKind.PUT, "k/b", first + 2),
        (ChangeKind.DELETE, "k/old", first + 3),
    ]
    assert res.revision == first + 3
    assert [c.version for c in got] == [c.revision for c in got]
    a, b = await pg_store.get("k/a"), await pg_store.get("k/b")
    assert a is not None and a.version == first + 1
    assert b is not None and b.version == first + 2
    # A transaction that changes nothing reports the head revision and logs nothing.
    noop = await pg_store.txn([Delete("k/missing")])
    assert noop.ok and noop.revision == first + 3
    assert parse_position(await pg_store.head())[1] == first + 3


async def test_concurrent_writers_leave_no_gap_in_the_feed(
    postgres_server: PostgresServer, pg_store: PostgresStore, namespace: str
) -> None:
    start = await pg_store.head()
    writers = [open_store(_url(postgres_server, namespace)) for _ in range(4)]

    async def write(i: int, store: Store) -> None:
        for j in range(25):
            await store.txn([Put(f"c/{i}/{j}/x", b"x"), Put(f"c/{i}/{j}/y", b"y")])
            lease = await store.acquire(f"c/{i}/lease", f"n{i}", 5)
            assert lease is not None
            assert await store.release(lease)

    feed = pg_store.watch("c/", since=start)
    try:
        await asyncio.gather(*(w.connect() for w in writers))
        await asyncio.gather(*(write(i, w) for i, w in enumerate(writers)))
        got = await next_changes(feed, 4 * 25 * 4, timeout=30)
    finally:
        await feed.aclose()
        for w in writers:
            await w.close()
    first = parse_position(start)[1]
    assert [c.revision for c in got] == list(range(first + 1, first + 1 + len(got)))
    puts = [c for c in got if c.kind == ChangeKind.PUT]
    assert len({c.key for c in puts}) == 4 * 25 * 2
    for c in puts:
        assert c.version == c.revision


async def test_expiry_is_logged_once_among_many_watchers(
    postgres_server: PostgresServer, pg_store: PostgresStore, namespace: str
) -> None:
    start = await pg_store.head()
    others = [open_store(_url(postgres_server, namespace)) for _ in range(2)]
    for s in others:
        await s.connect()
    feeds = [s.watch("lead", since=start) for s in [pg_store, *others]]
    try:
        lease = await pg_store.acquire("lead", "n1", 0.2)
        assert lease is not None
        # Every watcher races to write the expiry; the log must hold it once.
        seen = await asyncio.gather(*(next_changes(f, 2) for f in feeds))
        await pg_store.put("lead/marker", b"")
        after = await asyncio.gather(*(next_changes(f, 1) for f in feeds))
    finally:
        for f in feeds:
            await f.aclose()
        for s in others:
            await s.close()
    for changes, nxt in zip(seen, after, strict=True):
        assert [(c.kind, c.epoch) for c in changes] == [
            (ChangeKind.ACQUIRED, lease.epoch),
            (ChangeKind.EXPIRED, lease.epoch),
        ]
        assert [(c.kind, c.key) for c in nxt] == [(ChangeKind.PUT, "lead/marker")]


async def test_trimmed_log_reports_compaction(pg_store: PostgresStore) -> None:
    start = await pg_store.head()
    for i in range(20):
        await pg_store.put(f"r/{i}", b"x")
    pg_store.feed_retain = 5
    pg_store.trim_interval = 0
    await pg_store.expire_due()  # trims as a side effect
    with pytest.raises(FeedCompacted):
        await next_changes(pg_store.watch("r/", since=start), 1)
    # A position inside what is kept still works, and so does re-listing.
    incarnation, rev = parse_position(await pg_store.head())
    feed = pg_store.watch("r/", since=make_position(incarnation, rev - 3))
    got = await next_changes(feed, 3)
    await feed.aclose()
    assert [c.key for c in got] == ["r/17", "r/18", "r/19"]
    records, position = await pg_store.list("r/")
    assert len(records) == 20 and parse_position(position) == (incarnation, rev)


async def test_position_beyond_the_head_is_compacted(pg_store: PostgresStore) -> None:
    # What a watcher holds after the database was restored from an older backup.
    incarnation, rev = parse_position(await pg_store.head())
    with pytest.raises(FeedCompacted):
        await next_changes(pg_store.watch("", since=make_position(incarnation, rev + 10)), 1)


async def test_same_store_works_at_once_after_server_restart(
    postgres_server: PostgresServer, pg_store: PostgresStore
) -> None:
    lease = await pg_store.acquire("lead", "n1", 30)
    assert lease is not None
    await pg_store.put("k", b"1")
    postgres_server.restart()
    # The first call after the restart already works: connections the server closed are
    # noticed before use and replaced, instead of failing one call each.
    held = await pg_store.get_lease("lead")
    assert held is not None and held.epoch == lease.epoch
    renewed = await pg_store.renew("n1", [lease])
    assert renewed["lead"] is not None
    assert (await pg_store.put("k", b"2")).ok


async def test_hung_server_raises_store_timeout(
    postgres_server: PostgresServer, namespace: str
) -> None:
    app = "baton_" + uuid.uuid4().hex[:8]
    store = PostgresStore(
        f"{postgres_server.url}?application_name={app}", namespace=namespace, request_timeout=0.5
    )
    async with store:
        await store.now()
        pids = await _backend_pids(postgres_server, app)
        assert pids
        loop = asyncio.get_running_loop()
        with _stopped(pids):
            t0 = loop.time()
            with pytest.raises(StoreTimeout):
                await store.now()
            # The deadline is the store's, not the driver's (which would try to cancel first).
            assert loop.time() - t0 < 2
        back: bool = await await_for(
            lambda: store_reachable(store), what="store back after the server resumed"
        )
        assert back and await store.acquire("lead", "n1", 5) is not None
        done: bool = await await_for(
            lambda: not store._orphans, what="the abandoned call to wind up"
        )
        assert done


async def test_errors_never_show_the_password() -> None:
    store = open_store(f"postgresql://u:hunter2@127.0.0.1:{free_port()}/db?password=hunter2")
    with pytest.raises(StoreUnavailable) as info:
        await store.connect()
    assert "hunter2" not in str(info.value) and "hunter2" not in store.url
    await store.close()


async def test_renew_reports_each_lost_lease(pg_store: PostgresStore) -> None:
    leases = [await pg_store.acquire(f"l/{i:03d}", "n1", 5) for i in range(50)]
    held = [lease for lease in leases if lease is not None]
    assert len(held) == 50
    short = await pg_store.acquire("l/short", "n1", 0.1)
    assert short is not None
    assert await pg_store.release(held[3])
    ghost = replace(held[0], name="l/never-acquired")
    stale = replace(held[7], epoch=held[7].epoch - 1)
    await wait_expired(pg_store, short.expires_at)
    batch = [*held[:7], stale, *held[8:], short, ghost]
    out = await pg_store.renew("n1", batch)
    lost = {name for name, lease in out.items() if lease is None}
    assert lost == {"l/003", "l/007", "l/short", "l/never-acquired"}
    for old in held:
        new = out[old.name]
        if new is not None:
            assert new.epoch == old.epoch and new.expires_at > old.expires_at
            stored = await pg_store.get_lease(old.name)
            assert stored is not None and stored.expires_at == new.expires_at


async def test_dropped_namespace_is_recreated_as_a_new_store(
    postgres_server: PostgresServer, pg_store: PostgresStore, namespace: str
) -> None:
    lease = await pg_store.acquire("lead", "n1", 30)
    assert lease is not None
    position = await pg_store.head()
    async with await psycopg.AsyncConnection.connect(postgres_server.url, autocommit=True) as a:
        await a.execute(f'DROP SCHEMA "{namespace}" CASCADE')

    async def put_works() -> bool:
        try:
            return (await pg_store.put("k", b"1")).ok
        except StoreUnavailable:
            return False

    recreated: bool = await await_for(put_works, what="the namespace to be recreated")
    assert recreated
    # All data is gone: old positions are refused and epochs still go up (the clock term).
    with pytest.raises(FeedCompacted):
        await next_changes(pg_store.watch("", since=position), 1)
    again = await pg_store.acquire("lead", "n2", 30)
    assert again is not None and again.epoch > lease.epoch


async def test_listing_is_in_code_point_order(pg_store: PostgresStore) -> None:
    keys = ["a", "a/b", "a-b", "a_b", "aB", "ab", "a\u00e9", "a\U0001f600", "a\U0002a6d6", "b", "A"]
    await pg_store.txn([Put(k, b"") for k in keys])
    records, _ = await pg_store.list("a")
    assert [r.key for r in records] == sorted(k for k in keys if k.startswith("a"))
    for k in ("a", "a\U0001f600", "ab"):
        assert await pg_store.acquire(k, "n1", 5) is not None
    assert [lease.name for lease in await pg_store.list_leases("a")] == sorted(
        ["a", "a\U0001f600", "ab"]
    )
    assert [r.key for r in (await pg_store.list("a\U0010ffff"))[0]] == []


async def test_connections_are_reused_and_all_closed(
    postgres_server: PostgresServer, namespace: str
) -> None:
    app = "baton_" + uuid.uuid4().hex[:8]
    store = PostgresStore(f"{postgres_server.url}?application_name={app}", namespace=namespace)
    async with store:
        for i in range(20):
            await store.put(f"k{i}", b"x")
            await store.get(f"k{i}")
        # Sequential calls share one connection...
        assert len(await _backend_pids(postgres_server, app)) == 1
        # ...concurrent ones open up to max_connections.
        await asyncio.gather(*(store.put(f"c{i}", b"x") for i in range(20)))
        assert 1 < len(await _backend_pids(postgres_server, app)) <= 4

    async def all_closed() -> bool:
        return not await _backend_pids(postgres_server, app)

    closed: bool = await await_for(all_closed, what="every connection to be closed")
    assert closed


async def test_watcher_survives_losing_its_listen_connection(
    postgres_server: PostgresServer, pg_store: PostgresStore
) -> None:
    feed = pg_store.watch("w/")
    try:
        waiter = asyncio.ensure_future(anext(feed))
        await asyncio.sleep(0.3)  # the watcher is now waiting for a notification
        async with await psycopg.AsyncConnection.connect(
            postgres_server.url, autocommit=True
        ) as admin:
            cur = await admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query = %s",
                [f'LISTEN "{pg_store.namespace}_feed"'],
            )
            assert await cur.fetchall() == [(True,)]
        await pg_store.put("w/1", b"1")
        first = await asyncio.wait_for(waiter, 5)
        assert first.key == "w/1"
        # Listening again: the next change still arrives.
        await pg_store.put("w/2", b"2")
        second = await asyncio.wait_for(anext(feed), 5)
        assert second.key == "w/2"
    finally:
        await feed.aclose()
