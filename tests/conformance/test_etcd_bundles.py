"""Lease bundles of the etcd store (``baton.store.etcd_bundles``): a renewal of many leases
moves them into a bundle, the next one is a single put, and every other operation (get, list,
release, fenced writes, expiry, takeover, another client renewing or releasing a member) sees
a bundled lease exactly as an unbundled one. The threshold is lowered to 3 leases here, and the
conformance suite's renewal tests run again with it at 1 (every renewal bundles)."""

from __future__ import annotations

import asyncio
import base64
import uuid
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

import httpx
import pytest

from baton.store import Change, ChangeKind, LeaseHeld, Put, Store, etcd_bundles, open_store
from baton.store.base import Lease
from baton.store.etcd_gateway import b64, prefix_end
from baton.testing import await_for
from baton.testing.servers import EtcdServer
from tests.conformance import test_store
from tests.conftest import Backend, make_backend

NAMES = [f"w{i}" for i in range(4)]


@pytest.fixture(params=["etcd"])
def backend(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Backend:
    """The conformance suite's renewal tests below, with every renewal bundled."""
    monkeypatch.setattr(etcd_bundles, "BUNDLE_MIN", 1)
    return make_backend(request, tmp_path)


test_renew_many_keeps_epochs_and_extends = test_store.test_renew_many_keeps_epochs_and_extends
test_renew_takes_the_ttl_it_is_given = test_store.test_renew_takes_the_ttl_it_is_given
test_renew_after_expiry_fails = test_store.test_renew_after_expiry_fails
test_renew_with_wrong_epoch_or_holder_batch = test_store.test_renew_with_wrong_epoch_or_holder_batch


@pytest.fixture
async def url(etcd_server: EtcdServer, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[str]:
    monkeypatch.setattr(etcd_bundles, "BUNDLE_MIN", 3)
    yield f"{etcd_server.store_url}?namespace=b{uuid.uuid4().hex[:10]}"


def keys(server: EtcdServer, url: str, kind: str) -> list[str]:
    """Names under ``<kind>/`` in the store's namespace, read from etcd directly."""
    prefix = f"/baton/{url.rsplit('=', 1)[1]}/{kind}/"
    body = {"key": b64(prefix), "range_end": prefix_end(prefix), "keys_only": True}
    res = httpx.post(f"{server.url}/v3/kv/range", json=body, timeout=5).json()
    return sorted(base64.b64decode(kv["key"]).decode()[len(prefix) :] for kv in res.get("kvs", []))


def etcd_revision(server: EtcdServer) -> int:
    res = httpx.post(f"{server.url}/v3/kv/range", json={"key": b64("-")}, timeout=5).json()
    return int(res["header"]["revision"])


async def held(store: Store, ttl: float = 5) -> list[Lease]:
    got = [await store.acquire(name, "n1", ttl) for name in NAMES]
    assert all(lease is not None for lease in got)
    return [lease for lease in got if lease is not None]


async def renewed_all(store: Store, leases: list[Lease]) -> list[Lease]:
    out = await store.renew("n1", leases)
    assert all(out[x.name] is not None for x in leases), out
    return [lease for lease in out.values() if lease is not None]


async def test_a_renewal_bundles_and_the_next_is_one_put(etcd_server: EtcdServer, url: str) -> None:
    async with open_store(url) as store:
        leases = await renewed_all(store, await held(store))
        assert keys(etcd_server, url, "bx") == NAMES and keys(etcd_server, url, "exp") == []
        assert len(keys(etcd_server, url, "bnd")) == 1
        before = etcd_revision(etcd_server)
        again = await renewed_all(store, leases)
        assert etcd_revision(etcd_server) == before + 1  # one write: the bundle's key
        assert all(
            b.expires_at > a.expires_at and b.epoch == a.epoch
            for a, b in zip(leases, again, strict=True)
        )
        # Read back as any lease: holder, epoch, ttl and the bundle's expiry.
        got = await store.get_lease("w1")
        assert got is not None and (got.holder, got.epoch) == ("n1", again[1].epoch)
        assert got.expires_at == pytest.approx(again[1].expires_at, abs=1e-3)
        assert [x.name for x in await store.list_leases("w")] == NAMES
        assert await store.acquire("w2", "n2", 5) is None
        # A fenced write holds while the bundle does.
        fenced = await store.txn([Put("state", b"x")], [LeaseHeld("w0", "n1", again[0].epoch)])
        assert fenced.ok
        assert (await store.put("state", b"y", lease=again[0])).ok


async def test_release_of_a_member(etcd_server: EtcdServer, url: str) -> None:
    async with open_store(url) as store:
        leases = await renewed_all(store, await held(store))
        assert await store.release(leases[0])
        assert await store.get_lease("w0") is None
        assert not (await store.put("state", b"x", lease=leases[0])).ok
        before = etcd_revision(etcd_server)
        out = await store.renew("n1", leases)
        assert out["w0"] is None and all(out[n] is not None for n in NAMES[1:])
        assert etcd_revision(etcd_server) == before + 1  # the rest is still one bundle
        assert (await store.acquire("w0", "n2", 5)) is not None


async def test_another_client_releasing_or_renewing_a_member(
    etcd_server: EtcdServer, url: str
) -> None:
    async with open_store(url) as owner, open_store(url) as other:
        leases = await renewed_all(owner, await held(owner))
        # Another client of the same holder renews one member: moved out, renewed on its own.
        (moved,) = await renewed_all(other, [leases[1]])
        assert "w1" not in keys(etcd_server, url, "bx") and "w1" in keys(etcd_server, url, "exp")
        # And releases another: the owner's next renewal finds the bundle changed, re-checks.
        assert await other.release(leases[2])
        out = await owner.renew("n1", leases)
        assert out["w2"] is None
        assert all(out[n] is not None for n in ("w0", "w1", "w3")), out
        got, w3 = await other.get_lease("w3"), out["w3"]
        assert got is not None and w3 is not None
        assert got.expires_at == pytest.approx(w3.expires_at, abs=1e-3)
        assert moved.epoch == leases[1].epoch


async def test_bundled_leases_expire_through_the_feed(etcd_server: EtcdServer, url: str) -> None:
    async with open_store(url) as store:
        start = await store.head()
        leases = await held(store, ttl=5)
        short = await renewed_all(store, [replace(x, ttl=0.5) for x in leases])
        assert len(keys(etcd_server, url, "bnd")) == 1
        feed = store.watch("w", since=start)
        got: list[Change] = []
        async with asyncio.timeout(10):
            while len(got) < 2 * len(NAMES):
                got.append(await anext(feed))
        await feed.aclose()
        expired = [c for c in got if c.kind is ChangeKind.EXPIRED]
        assert sorted((c.key, c.epoch) for c in expired) == [(x.name, x.epoch) for x in short]
        lapses = await store.lapses(NAMES)
        assert all(lapses[n].at == pytest.approx(short[0].expires_at, abs=1e-3) for n in NAMES)
        assert await store.renew("n1", short) == dict.fromkeys(NAMES)
        taken = await store.acquire("w3", "n2", 5)
        assert taken is not None and taken.epoch > short[3].epoch
        # The bundle, with no member left, is deleted by the next look for expiries.
        await await_for(lambda: _no_bundles(store, etcd_server, url), what="the bundle gone")


async def _no_bundles(store: Store, server: EtcdServer, url: str) -> bool:
    await store.expire_due()
    return keys(server, url, "bnd") == [] and keys(server, url, "bm") == []
