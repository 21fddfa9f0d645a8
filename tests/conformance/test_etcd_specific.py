"""What only the etcd store has: bad input refused in one line that names the endpoint (an
unreachable member, a prefix holding someone else's keys, bad credentials, an etcd too old for
the v3 API), ``baton elect`` leading a command through ``--store etcd://...``, and node agents
on etcd."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from baton.errors import ConfigError, StoreUnavailable
from baton.local.cluster import LocalCluster
from baton.store import ChangeKind, open_store
from baton.store.etcd import EtcdStore
from baton.store.etcd_gateway import b64, check_version, prefix_end, unb64
from baton.testing import free_port
from baton.testing.servers import EtcdServer

BATON = str(Path(sys.executable).with_name("baton"))


def baton(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([BATON, *args], capture_output=True, text=True, timeout=60, check=False)


def one_line(message: str, *needles: str) -> None:
    assert "\n" not in message.strip(), message
    for needle in needles:
        assert needle in message, message


def keys_under(server: EtcdServer, prefix: str) -> list[bytes]:
    end = prefix[:-1] + chr(ord(prefix[-1]) + 1)
    body = {"key": b64(prefix), "range_end": b64(end), "keys_only": True}
    res = httpx.post(f"{server.url}/v3/kv/range", json=body, timeout=5).json()
    return [unb64(kv["key"]) for kv in res.get("kvs", [])]


async def test_unreachable_member_is_one_line_naming_it() -> None:
    port = free_port()
    store = open_store(f"etcd://127.0.0.1:{port}/baton")
    with pytest.raises(StoreUnavailable) as err:
        await store.connect()
    one_line(str(err.value), f"127.0.0.1:{port}", "check that etcd runs")


async def test_prefix_with_foreign_keys_is_refused_and_left_alone(etcd_server: EtcdServer) -> None:
    prefix = f"/registry-{uuid.uuid4().hex[:8]}"
    foreign = {"key": b64(f"{prefix}/pods/web-1"), "value": b64("{}")}
    async with httpx.AsyncClient(timeout=5) as client:
        (await client.post(f"{etcd_server.url}/v3/kv/put", json=foreign)).raise_for_status()
    store = open_store(f"etcd://127.0.0.1:{etcd_server.client_port}{prefix}")
    with pytest.raises(ConfigError) as err:
        await store.connect()
    one_line(str(err.value), prefix, "check the prefix")
    assert keys_under(etcd_server, prefix + "/") == [f"{prefix}/pods/web-1".encode()]


@pytest.fixture(scope="module")
def etcd_with_auth(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdServer]:
    """A private etcd with authentication on: ``root`` (password ``rootpw``), and ``baton``
    (password ``batonpw``) whose role may read and write under ``/baton/`` only."""
    grant = {"permType": "READWRITE", "key": b64("/baton/"), "range_end": prefix_end("/baton/")}
    with EtcdServer(tmp_path_factory.mktemp("etcd-auth")) as server:
        for path, body in (
            ("/v3/auth/user/add", {"name": "root", "password": "rootpw"}),
            ("/v3/auth/user/grant", {"user": "root", "role": "root"}),
            ("/v3/auth/role/add", {"name": "baton"}),
            ("/v3/auth/role/grant", {"name": "baton", "perm": grant}),
            ("/v3/auth/user/add", {"name": "baton", "password": "batonpw"}),
            ("/v3/auth/user/grant", {"user": "baton", "role": "baton"}),
            ("/v3/auth/enable", {}),
        ):
            httpx.post(f"{server.url}{path}", json=body, timeout=5).raise_for_status()
        yield server


async def test_credentials(etcd_with_auth: EtcdServer) -> None:
    hostport = f"127.0.0.1:{etcd_with_auth.client_port}"
    wrong = open_store(f"etcd://baton:sekret@{hostport}/baton")
    with pytest.raises(StoreUnavailable) as err:
        await wrong.connect()
    one_line(str(err.value), hostport, "check the user and password")
    assert "sekret" not in str(err.value) and "sekret" not in wrong.url
    anonymous = open_store(f"etcd://{hostport}/baton")
    with pytest.raises(StoreUnavailable) as err:
        await anonymous.connect()
    one_line(str(err.value), hostport, "user:password@")
    elsewhere = open_store(f"etcd://baton:batonpw@{hostport}/other")
    with pytest.raises(StoreUnavailable) as err:
        await elsewhere.connect()
    one_line(str(err.value), hostport, "grant its role read and write on the prefix '/other'")
    # A user whose role covers the prefix uses every part of the store: clock, leases, feed.
    async with open_store(f"etcd://baton:batonpw@{hostport}/baton") as store:
        feed = store.watch("k", since=await store.head())
        assert (await store.put("k", b"v")).ok
        change = await asyncio.wait_for(anext(feed), 10)
        assert change.key == "k" and change.value == b"v"
        await feed.aclose()
        lease = await store.acquire("lead", "n1", 5)
        assert lease is not None and (await store.get_lease("lead")) == lease
        assert abs(await store.now() - time.time()) < 5


def test_etcd_older_than_3_4_is_refused() -> None:
    # No etcd 2 can be installed here: the check is fed what etcd 2.3 answers on /version.
    with pytest.raises(StoreUnavailable) as err:
        check_version("http://10.0.0.5:2379", {"etcdserver": "2.3.8", "etcdcluster": "2.3.0"})
    one_line(str(err.value), "http://10.0.0.5:2379", "2.3.8", "3.4 or later")
    with pytest.raises(StoreUnavailable, match="not an etcd server"):
        check_version("http://10.0.0.5:6379", "-ERR wrong protocol")
    check_version("http://10.0.0.5:2379", {"etcdserver": "3.5.9", "etcdcluster": "3.5.0"})


def test_cli_unreachable_store_is_one_line() -> None:
    port = free_port()
    res = baton("elect", "job", "--store", f"etcd://127.0.0.1:{port}/baton", "--", "true")
    assert res.returncode == 1, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("baton: error: "), res.stderr
    assert f"127.0.0.1:{port}" in lines[0] and "Traceback" not in res.stderr


def test_bad_etcd_urls_are_config_errors() -> None:
    for url in ("etcd://127.0.0.1:notaport/baton", "etcd:///baton", "etcd://h:1/p?tls=yes"):
        with pytest.raises(ConfigError):
            open_store(url)
    assert "sekret" not in open_store("etcd://u:sekret@h:1,h:2/p").url


def test_elect_runs_the_command_and_releases(etcd_server: EtcdServer) -> None:
    url = f"{etcd_server.store_url}?namespace=cli{uuid.uuid4().hex[:8]}"
    res = baton(
        # The default ttl: its 0.5 s request timeout, not ttl 2's 0.1 s, which a loaded 2-core
        # machine can miss in the resign after the command exits (two round trips on etcd).
        "elect", "job", "--store", url, "--id", "me", "--",
        "sh", "-c", 'test -n "$BATON_EPOCH" && test "$BATON_HOLDER" = me && exit 7',
    )  # fmt: skip
    assert res.returncode == 7, res.stderr
    show = baton("lease", "show", "job", "--store", url)
    assert show.returncode == 1 and "free" in show.stdout, "lease released after COMMAND exited"


def test_node_agent_runs_on_etcd(etcd_server: EtcdServer, tmp_path: Path) -> None:
    url = f"{etcd_server.store_url}?namespace=nodes{uuid.uuid4().hex[:8]}"
    with LocalCluster(1, url, tmp_path, ttl=2) as c:
        c.wait_for(c.controller)
        c.wait_for(lambda: list(c.states().values()) == ["live"])


async def test_one_trip_writes_fall_back_when_another_client_wrote(etcd_server: EtcdServer) -> None:
    """A release and a fenced put compare the counter this store last saw instead of reading
    first; after another client's write they must read and still number changes in order."""
    url = f"{etcd_server.store_url}?namespace=two{uuid.uuid4().hex[:8]}"
    async with open_store(url) as a, open_store(url) as b:
        start = await a.head()
        lease = await a.acquire("lead", "a", 30)
        assert lease is not None
        assert (await b.put("other", b"1")).ok  # a's view of the counter is now stale
        assert (await a.put("state", b"x", lease=lease)).ok
        assert (await b.put("other", b"2")).ok
        assert await a.release(lease)
        feed = a.watch("", since=start)
        got = [await asyncio.wait_for(anext(feed), 10) for _ in range(5)]
        await feed.aclose()
    assert [(c.kind.value, c.key) for c in got] == [
        ("acquired", "lead"), ("put", "other"), ("put", "state"), ("put", "other"),
        ("released", "lead"),
    ]  # fmt: skip
    first = got[0].revision
    assert [c.revision for c in got] == list(range(first, first + 5))


async def test_acquires_that_wait_together_commit_together(etcd_server: EtcdServer) -> None:
    """Acquires queued behind one another are committed a group at a time: every one gets its
    answer (held ones refused), and the feed numbers their changes one after another."""
    url = f"{etcd_server.store_url}?namespace=grp{uuid.uuid4().hex[:8]}"
    async with open_store(url) as a, open_store(url) as b:
        taken = await b.acquire("g07", "other", 30)
        assert taken is not None
        start = await a.head()
        names = [f"g{i:02d}" for i in range(40)]
        got = await asyncio.gather(*(a.acquire(n, "me", 30) for n in names))
        assert [n for n, lease in zip(names, got, strict=True) if lease is None] == ["g07"]
        assert all(lease.holder == "me" for lease in got if lease is not None)
        feed = a.watch("g", since=start)
        changes = [await asyncio.wait_for(anext(feed), 10) for _ in range(39)]
        await feed.aclose()
    assert sorted(c.key for c in changes) == sorted(set(names) - {"g07"})
    assert all(c.kind is ChangeKind.ACQUIRED for c in changes)
    assert [c.revision for c in changes] == list(
        range(changes[0].revision, changes[0].revision + 39)
    )
    held = {lease.name: lease.epoch for lease in got if lease is not None}
    assert {c.key: c.epoch for c in changes} == held


async def test_a_watcher_gets_changes_from_its_watch_without_asking(
    etcd_server: EtcdServer,
) -> None:
    """etcd's watch delivers each log entry with its value: a watcher woken by a change (not an
    acquisition) makes no request to read it, nor to look for due expiries again."""
    url = f"{etcd_server.store_url}?namespace=tail{uuid.uuid4().hex[:8]}"
    async with open_store(url) as watcher, open_store(url) as writer:
        assert isinstance(watcher, EtcdStore)
        feed = watcher.watch("k", since=await watcher.head())

        async def put_and_count(value: bytes) -> int:
            """The watcher's requests while ``value`` is written and delivered to it."""
            before = watcher.requests
            assert (await writer.put("k", value)).ok
            assert (await asyncio.wait_for(anext(feed), 10)).value == value
            return watcher.requests - before

        # The tail serves once a complete read of the log was made with the watch open; on a
        # loaded machine the watch may open after the first reads, so it takes a few changes.
        asked = [await put_and_count(str(n).encode()) for n in range(1, 3)]
        n = 3
        while asked[-1] and n < 8:
            asked.append(await put_and_count(str(n).encode()))
            n += 1
        assert asked[-1] == 0, asked
        assert [await put_and_count(f"x{i}".encode()) for i in range(3)] == [0, 0, 0]
        await feed.aclose()
