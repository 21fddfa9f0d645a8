"""The etcd store's acquire right after a release its watch delivered: one round trip when
nothing changed since, and the ordinary read-then-commit (same outcome) when something did."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncGenerator

from baton.store import Change, ChangeKind, open_store
from baton.store.etcd import EtcdStore
from baton.testing.servers import EtcdServer


async def _until(feed: AsyncGenerator[Change, None], kind: ChangeKind) -> Change:
    while True:
        change = await asyncio.wait_for(anext(feed), 10)
        if change.kind is kind:
            return change


def _url(server: EtcdServer) -> str:
    return f"{server.store_url}?namespace=ho{uuid.uuid4().hex[:8]}"


async def test_named_successor_acquires_in_one_request(etcd_server: EtcdServer) -> None:
    """The successor's watch delivered the release (the feed waits on the watch once it has
    served the acquisition): its acquire is one commit, numbered right after the release."""
    url = _url(etcd_server)
    async with open_store(url) as a, open_store(url) as b:
        assert isinstance(b, EtcdStore)
        start = await b.head()
        feed = b.watch("lead", since=start)
        old = await a.acquire("lead", "a", 30)
        assert old is not None
        await _until(feed, ChangeKind.ACQUIRED)
        assert await a.release(old, successor="b")
        released = await _until(feed, ChangeKind.RELEASED)
        assert released.successor == "b"
        before = b.requests
        new = await b.acquire("lead", "b", 30)
        assert b.requests == before + 1
        assert new is not None and new.holder == "b" and new.epoch > old.epoch
        acquired = await _until(feed, ChangeKind.ACQUIRED)
        assert (acquired.holder, acquired.epoch) == ("b", new.epoch)
        assert acquired.revision == released.revision + 1
        held = await a.get_lease("lead")
        assert held is not None and (held.holder, held.epoch) == ("b", new.epoch)
        await feed.aclose()


async def test_a_change_after_the_release_sends_the_acquire_to_read(
    etcd_server: EtcdServer,
) -> None:
    """Another client writes between the release and the acquire: the one-request commit fails
    its compares, the acquire reads and still numbers its change after the other write."""
    url = _url(etcd_server)
    async with open_store(url) as a, open_store(url) as b, open_store(url) as c:
        assert isinstance(b, EtcdStore)
        feed = b.watch("", since=await b.head())
        old = await a.acquire("lead", "a", 30)
        assert old is not None
        await _until(feed, ChangeKind.ACQUIRED)
        assert await a.release(old, successor="b")
        await _until(feed, ChangeKind.RELEASED)
        assert (await c.put("other", b"1")).ok  # b's watch may not have delivered it yet
        before = b.requests
        new = await b.acquire("lead", "b", 30)
        assert new is not None and new.epoch > old.epoch
        assert b.requests > before + 1
        kinds = [(ch.kind, ch.key) for ch in [await _until(feed, ChangeKind.PUT)]]
        acquired = await _until(feed, ChangeKind.ACQUIRED)
        assert kinds == [(ChangeKind.PUT, "other")]
        assert (acquired.holder, acquired.epoch) == ("b", new.epoch)
        await feed.aclose()


async def test_a_lease_reserved_for_another_is_refused_after_its_release(
    etcd_server: EtcdServer,
) -> None:
    url = _url(etcd_server)
    async with open_store(url) as a, open_store(url) as c:
        feed = c.watch("lead", since=await c.head())
        old = await a.acquire("lead", "a", 30)
        assert old is not None
        assert await a.release(old, successor="b")
        await _until(feed, ChangeKind.RELEASED)
        assert await c.acquire("lead", "c", 30) is None
        assert await c.get_lease("lead") is None
        await feed.aclose()


async def test_a_release_to_nobody_is_taken_in_one_request_by_anyone(
    etcd_server: EtcdServer,
) -> None:
    url = _url(etcd_server)
    async with open_store(url) as a, open_store(url) as c:
        assert isinstance(c, EtcdStore)
        feed = c.watch("lead", since=await c.head())
        old = await a.acquire("lead", "a", 30)
        assert old is not None
        await _until(feed, ChangeKind.ACQUIRED)  # the release then arrives on c's watch
        assert await a.release(old)
        await _until(feed, ChangeKind.RELEASED)
        before = c.requests
        new = await c.acquire("lead", "c", 30)
        assert c.requests == before + 1
        assert new is not None and new.epoch > old.epoch
        await feed.aclose()


async def test_an_acquisition_seen_on_the_watch_needs_no_look_for_due_expiries(
    etcd_server: EtcdServer,
) -> None:
    """An ``acquired`` entry carries the lease's expiry: a watcher that saw it makes no request
    to look for due expiries again, and still logs that lease's expiry when it is due."""
    url = _url(etcd_server)
    async with open_store(url) as watcher, open_store(url) as writer:
        assert isinstance(watcher, EtcdStore)
        feed = watcher.watch("", since=await watcher.head())
        for value in (b"1", b"2"):  # the second comes from the watch
            assert (await writer.put("k", value)).ok
            await _until(feed, ChangeKind.PUT)
        assert await watcher.expire_due() is None  # a look: no lease yet
        lease = await writer.acquire("soon", "w", 30)
        assert lease is not None
        await _until(feed, ChangeKind.ACQUIRED)
        before = watcher.requests
        due = await watcher.expire_due()
        assert watcher.requests == before
        assert due is not None and 29 < due < 31  # the lease just acquired, due in 30 s
        short = await writer.acquire("sooner", "w", 0.3)
        assert short is not None
        expired = await _until(feed, ChangeKind.EXPIRED)
        assert (expired.key, expired.epoch) == ("sooner", short.epoch)
        await feed.aclose()
