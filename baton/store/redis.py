"""The Redis backend of the coordination store (Redis 6.2+, one primary; not Redis Cluster).

Every mutation is one Lua script, so it is atomic, and reads the store clock with ``TIME`` inside
the script (Redis replicates script effects, not the script, so this is allowed). Times are
integer microseconds inside Redis and float seconds outside.

Keys, all under ``"<namespace>:"``:

=====================  ======================================================================
``incarnation``        random id of this data set; positions from another one are compacted
``revision``           the store revision counter (``INCR``)
``log``                the change log: a stream with one entry per revision (id
                       ``<revision>-0``), trimmed to about ``log_limit`` entries
``epochs``             hash name -> last epoch granted; never expires, so epochs keep growing
                       across releases and expiries
``counters``           hash name -> last epoch of an epoch counter (``next_epochs``); never
                       expires either
``lease``              hash name -> holder, epoch and ttl of every held lease, joined by
                       newlines (until its expiry is logged)
``expiry``             sorted set of held lease names by expiry in microseconds: the only
                       copy of a lease's expiry
``lease_names``        sorted set of held lease names, all score 0 (``ZRANGEBYLEX`` listing)
``lapsed``             hash name -> when the lease stopped being held (its expiry, or its
                       release) and its ttl, joined by a newline; removed when it is acquired
                       again (:meth:`RedisStore.lapses`)
``handover:<name>``    hash ``successor until`` of a lease released to a named successor
``records``            sorted set of record keys, all score 0
``r:<key>``            hash of one record: ``value version``
``feed`` (channel)     pub/sub channel: each mutation publishes its revision there
=====================  ======================================================================

All held leases share one hash, and expiries live only in the index, because renewal is the
hot path: a renewal of 100k leases in one call reads and writes them with one ``HMGET``, one
``ZMSCORE`` and one ``ZADD`` per thousand leases. A hash per lease costs two commands per lease
(measured: about 0.55 s of server time for 100k leases, against about 0.3 s).

Redis' own key expiry is not used for leases: an expiry must become an ``expired`` change in the
log, and Redis expiring a key silently cannot do that. Expiry is judged against ``TIME`` by every
script and logged by :meth:`RedisStore.expire_due` or by the ``acquire`` that takes a lease over.

Data loss (a restart without persistence, ``FLUSHALL``, a failover to a lagging replica) is
survivable: epochs stay increasing through the clock term of ``max(now, last + 1)``, every script
recreates the incarnation key from a fresh random candidate sent by the client, so old positions
raise :class:`~baton.errors.FeedCompacted`, and a position ahead of the store's revision does too.
The server must not evict keys (``maxmemory-policy noeviction``, the default).
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from importlib import resources
from typing import Any, Final, TypeVar

import redis.asyncio as aioredis
from redis.asyncio.client import PubSub
from redis.asyncio.connection import parse_url
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.commands.core import AsyncScript
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError

from baton.errors import (
    ConfigError,
    FeedCompacted,
    StoreError,
    StoreTimeout,
    StoreUnavailable,
    redact_url,
)
from baton.store.base import (
    Capabilities,
    Change,
    ChangeKind,
    Condition,
    Delete,
    FeedListener,
    Lapse,
    Lease,
    LeaseHeld,
    Op,
    Position,
    Put,
    Record,
    Store,
    TxnResult,
    VersionIs,
    bulk_allocation,
    check_floors,
    check_name,
    check_names,
    check_ops,
    check_same_holder,
    check_ttl,
    make_position,
)

#: Roughly how many change-log entries are kept (``XADD ... MAXLEN ~``).
LOG_LIMIT: Final = 100_000
#: At most this many expiries are logged by one ``expire_due`` call, so that a mass expiry does
#: not block the server in one long script; the call then reports more as due at once.
EXPIRE_BATCH: Final = 1000
#: Seconds to connect, and to wait for any one reply.
CONNECT_TIMEOUT: Final = 5.0
SOCKET_TIMEOUT: Final = 5.0
#: Connections for requests; more concurrent requests wait for a free one.
MAX_CONNECTIONS: Final = 64
#: Connections for watchers (each holds one while it watches).
MAX_WATCHERS: Final = 10_000
#: Seconds a pooled connection may idle before it is pinged prior to reuse.
HEALTH_CHECK_INTERVAL: Final = 10

_US = 1_000_000

_T = TypeVar("_T")

#: The fixed keys, passed to every script as KEYS in this order.
_KEY_NAMES: Final = (
    "incarnation", "revision", "log", "records", "lease", "lease_names", "expiry", "epochs",
    "counters", "lapsed",
)  # fmt: skip

# -- Lua (baton/store/lua/*.lua) -----------------------------------------------------------------
#
# Every script gets the same KEYS (the fixed keys) and ARGV[1..4] (the prefix of per-item keys,
# the notification channel, a fresh incarnation candidate and the log limit); its own arguments
# start at ARGV[5]. Lua numbers are doubles: microsecond times (~1.8e15) and revisions are exact
# below 2^53, but tostring() would print 1.8e+15, so numbers go to Redis through fmt().


def _lua(name: str) -> str:
    """The script ``lua/<name>.lua`` of this package (package data, read once at import)."""
    return resources.files("baton.store").joinpath("lua", f"{name}.lua").read_text()


#: Defines the helpers every script uses (clock, fmt, revisions, the log); put before each.
_PRELUDE: Final = _lua("prelude")
_SCRIPTS: Final = {
    name: _lua(name)
    for name in (
        "acquire", "renew", "release", "next_epochs", "get_lease", "list_leases", "lapses",
        "expire_due", "txn", "head", "list", "changes",
    )
}  # fmt: skip


def _lex_range(prefix: str) -> tuple[bytes, bytes]:
    """A ZRANGEBYLEX range of every member starting with ``prefix``. UTF-8 never contains the
    byte 0xFF, so ``prefix + 0xFF`` is above every such member."""
    if not prefix:
        return b"-", b"+"
    raw = prefix.encode()
    return b"[" + raw, b"(" + raw + b"\xff"


def _text(value: bytes) -> str:
    return value.decode()


async def _cancellable(aw: Awaitable[_T]) -> _T:
    """Await a driver call in its own task, so that cancelling the caller always cancels it.

    redis-py writes with ``asyncio.wait_for``, which on Python 3.11 swallows a cancellation that
    arrives as the write completes: awaited directly, the caller would carry on as if it had not
    been cancelled (an ``Election.stop()`` that cannot stop its watcher). Shielded, the caller
    gets its CancelledError regardless; the abandoned call is cancelled too, and its outcome is
    collected so that nothing is logged as never retrieved.
    """
    inner = asyncio.ensure_future(aw)
    try:
        return await asyncio.shield(inner)
    except asyncio.CancelledError:
        inner.cancel()
        inner.add_done_callback(_collect)
        raise


def _collect(fut: asyncio.Future[Any]) -> None:
    if not fut.cancelled():
        fut.exception()


class _PubSubListener(FeedListener):
    """Wakes a watcher on a pub/sub notification of the store's channel."""

    def __init__(self, store: RedisStore, pubsub: PubSub) -> None:
        self._store = store
        self._pubsub = pubsub

    async def wait(self, timeout: float) -> None:
        try:
            await _cancellable(self._next(max(timeout, 0.0)))
        except (RedisError, OSError) as exc:
            raise self._store._error("waiting for change notifications", exc) from exc

    async def _next(self, timeout: float) -> None:
        msg = await self._pubsub.get_message(ignore_subscribe_messages=True, timeout=timeout)
        # Drain what already arrived: a burst of writes costs one re-read of the log, not one
        # per notification.
        while msg is not None:
            msg = await self._pubsub.get_message(ignore_subscribe_messages=True, timeout=0.0)


class RedisStore(Store):
    """A :class:`~baton.store.base.Store` in Redis: Lua scripts for atomic writes on the server's
    clock, a stream as the change log and pub/sub to wake watchers.

    ``url`` is a ``redis://`` or ``rediss://`` URL (any password is kept out of :attr:`url` and
    every message). ``namespace`` prefixes every key, so independent clusters can share a server.
    """

    capabilities = Capabilities(multi_host=True, durable=False)

    def __init__(self, url: str, *, namespace: str = "baton", log_limit: int = LOG_LIMIT) -> None:
        self.url = redact_url(url)
        try:
            parse_url(url)
        except ValueError as exc:
            raise ConfigError(
                f"bad Redis URL {self.url!r}: {exc}; expected redis://[:password@]host:port/db"
            ) from None
        if log_limit < 1:
            raise ConfigError(f"bad log_limit {log_limit!r}: keep at least 1 change-log entry")
        self._raw_url = url
        self.namespace = namespace
        prefix = f"{namespace}:"
        self._prefix = prefix
        self._channel = f"{prefix}feed"
        self._keys = [f"{prefix}{name}" for name in _KEY_NAMES]
        self._log_limit = log_limit
        self._expire_batch = EXPIRE_BATCH
        self._client: aioredis.Redis | None = None
        self._feed_client: aioredis.Redis | None = None
        self._scripts: dict[str, AsyncScript] = {}
        self._connect_lock = asyncio.Lock()

    # -- plumbing ----------------------------------------------------------------------------

    def _error(self, what: str, exc: BaseException) -> StoreError:
        """Translate a driver exception. redis-py messages name host and port, never the
        password; they are still passed through the redaction."""
        detail = redact_url(str(exc)) or type(exc).__name__
        if isinstance(exc, RedisTimeoutError | TimeoutError):
            return StoreTimeout(
                f"Redis store {self.url} did not answer {what} in time ({detail}); "
                "check the server's load and the network"
            )
        if isinstance(exc, RedisConnectionError | OSError):
            return StoreUnavailable(
                f"Redis store {self.url} unreachable during {what}: {detail}; check that the "
                "server is running and reachable"
            )
        # The server answered with an error: out of memory, a read-only replica, a busy script.
        return StoreUnavailable(f"Redis store {self.url} refused {what}: {detail}")

    def _not_connected(self) -> StoreUnavailable:
        return StoreUnavailable(
            f"Redis store {self.url} is not connected: call connect() or use 'async with'"
        )

    def _require(self) -> aioredis.Redis:
        if self._client is None:
            raise self._not_connected()
        return self._client

    async def _call(self, what: str, call: Callable[[], Awaitable[_T]], *, idempotent: bool) -> _T:
        """Make one request. An idempotent one is retried once when the connection broke (a
        pooled connection to a restarted server); the others are not, because the first
        attempt may have been applied and a second would report a wrong outcome."""
        attempts = 2 if idempotent else 1
        for attempt in range(attempts):
            try:
                return await _cancellable(call())
            except RedisConnectionError as exc:
                if attempt + 1 < attempts:
                    continue
                raise self._error(what, exc) from exc
            except (RedisError, OSError) as exc:
                raise self._error(what, exc) from exc
        raise AssertionError("unreachable")  # pragma: no cover

    async def _run(self, script: str, args: Sequence[str | bytes], *, idempotent: bool) -> Any:
        """Run one of the scripts (see :meth:`_call` for ``idempotent``)."""
        client = self._require()
        full: list[str | bytes] = [
            self._prefix,
            self._channel,
            secrets.token_hex(8),
            str(self._log_limit),
            *args,
        ]
        run = self._scripts[script]
        return await self._call(
            script.replace("_", " "),
            lambda: run(keys=self._keys, args=full, client=client),
            idempotent=idempotent,
        )

    # -- lifecycle ---------------------------------------------------------------------------

    def _make_clients(self, url: str) -> tuple[aioredis.Redis, aioredis.Redis]:
        """The request client and the watchers' client for the server at ``url`` (nothing is
        connected yet). A store that follows a master file builds new ones on a switch."""
        options: dict[str, Any] = {
            "socket_connect_timeout": CONNECT_TIMEOUT,
            "socket_timeout": SOCKET_TIMEOUT,
            "health_check_interval": HEALTH_CHECK_INTERVAL,
            # No silent retries in the driver: a retried script could apply twice. _run
            # retries what is safe to retry.
            "retry": Retry(NoBackoff(), 0),
            "decode_responses": False,
        }
        # Requests share a bounded pool and wait for a free connection (the default pool
        # fails at once when it is exhausted, and many tasks share one store). Watchers
        # hold their pub/sub connection for as long as they watch, so they get their own
        # pool and never starve requests.
        client = aioredis.Redis.from_pool(
            aioredis.BlockingConnectionPool.from_url(
                url,
                max_connections=MAX_CONNECTIONS,
                timeout=SOCKET_TIMEOUT,
                **options,
            )
        )
        feed_client = aioredis.Redis.from_pool(
            aioredis.ConnectionPool.from_url(url, max_connections=MAX_WATCHERS, **options)
        )
        return client, feed_client

    async def connect(self) -> None:
        """Create the connection pools and check the server answers. Idempotent."""
        async with self._connect_lock:
            if self._client is not None:
                return
            client, feed_client = self._make_clients(self._raw_url)
            try:
                await _cancellable(client.ping())
            except (RedisError, OSError) as exc:
                for c in (client, feed_client):
                    with contextlib.suppress(RedisError, OSError):
                        await c.aclose()
                raise self._error("connect", exc) from exc
            self._scripts = {
                name: client.register_script(_PRELUDE + src) for name, src in _SCRIPTS.items()
            }
            self._client = client
            self._feed_client = feed_client

    async def close(self) -> None:
        """Close the connection pools. Leases stay as they are."""
        async with self._connect_lock:
            clients = (self._client, self._feed_client)
            self._client = self._feed_client = None
            for client in clients:
                if client is not None:
                    with contextlib.suppress(RedisError, OSError):
                        await client.aclose()

    # -- time --------------------------------------------------------------------------------

    async def now(self) -> float:
        """Redis ``TIME``, in seconds."""
        client = self._require()
        sec, usec = await self._call("time", client.time, idempotent=True)
        return int(sec) + int(usec) / _US

    # -- leases ------------------------------------------------------------------------------

    async def acquire(self, name: str, holder: str, ttl: float) -> Lease | None:
        check_name("lease name", name)
        check_name("holder", holder)
        seconds = check_ttl(ttl)
        ttl_us = round(seconds * _US)
        res = await self._run("acquire", [name, holder, str(ttl_us)], idempotent=False)
        if res is None:
            return None
        epoch, exp = (int(x) for x in res)
        return Lease(name, holder, epoch, seconds, exp / _US)

    async def renew(self, holder: str, leases: Sequence[Lease]) -> dict[str, Lease | None]:
        """Renew ``leases`` of ``holder`` in one script call, each for its own ``ttl`` (which
        the store keeps from then on). Returns, per name, the renewed lease or None if it was
        lost (expired by the store clock, released, or held at another epoch)."""
        check_name("holder", holder)
        # One lease per name (the last given), so that every name gets exactly one answer.
        batch = list({lease.name: lease for lease in check_same_holder(holder, leases)}.values())
        if not batch:
            return {}
        ttls = [round(lease.ttl * _US) for lease in batch]
        for lease in batch:
            check_name("lease name", lease.name)  # printable: never a newline of the framing
        if not _US // 1000 <= min(ttls) <= max(ttls) <= 86400 * _US:
            for lease in batch:
                check_ttl(lease.ttl)
        framed = "\n".join(
            [f"{lease.name}\n{lease.epoch}\n{ttl}" for lease, ttl in zip(batch, ttls, strict=True)]
        )
        now_us, lost = await self._run("renew", [holder, framed], idempotent=True)
        start = int(now_us)
        # Leases renewed together mostly share a ttl: compute each distinct expiry once.
        expiry: dict[int, float] = {}
        out: dict[str, Lease | None] = {}
        with bulk_allocation():
            for lease, ttl in zip(batch, ttls, strict=True):
                at = expiry.get(ttl)
                if at is None:
                    at = expiry[ttl] = (start + ttl) / _US
                out[lease.name] = Lease(lease.name, holder, lease.epoch, lease.ttl, at)
        if lost:
            for i in bytes(lost).split(b","):
                out[batch[int(i) - 1].name] = None
        return out

    async def release(self, lease: Lease, *, successor: str | None = None) -> bool:
        check_name("lease name", lease.name)
        check_name("holder", lease.holder)
        if successor is not None:
            check_name("successor", successor)
        res = await self._run(
            "release",
            [lease.name, lease.holder, str(lease.epoch), successor or ""],
            idempotent=False,
        )
        return bool(res)

    async def next_epochs(self, floors: Mapping[str, int]) -> dict[str, int]:
        wanted = check_floors(floors)
        if not wanted:
            return {}
        framed = "\n".join(f"{name}\n{floor}" for name, floor in wanted.items())
        # Retrying is safe: a second attempt only skips an epoch, which the contract allows.
        res = await self._run("next_epochs", [framed], idempotent=True)
        return {name: int(e) for name, e in zip(wanted, res, strict=True)}

    async def get_lease(self, name: str) -> Lease | None:
        check_name("lease name", name)
        res = await self._run("get_lease", [name], idempotent=True)
        if res is None:
            return None
        holder, epoch, ttl_us, exp = res
        return Lease(name, _text(holder), int(epoch), int(ttl_us) / _US, int(exp) / _US)

    async def list_leases(self, prefix: str = "") -> list[Lease]:
        lo, hi = _lex_range(prefix)
        res = await self._run("list_leases", [lo, hi], idempotent=True)
        return [
            Lease(_text(res[i]), _text(res[i + 1]), int(res[i + 2]), int(res[i + 3]) / _US,
                  int(res[i + 4]) / _US)
            for i in range(0, len(res), 5)
        ]  # fmt: skip

    async def lapses(self, names: Sequence[str]) -> dict[str, Lapse]:
        wanted = check_names("lease name", names)
        if not wanted:
            return {}
        res = await self._run("lapses", ["\n".join(wanted)], idempotent=True)
        return {
            _text(res[i]): Lapse(_text(res[i]), int(res[i + 1]) / _US, int(res[i + 2]) / _US)
            for i in range(0, len(res), 3)
        }

    async def expire_due(self) -> float | None:
        res = await self._run("expire_due", [str(self._expire_batch)], idempotent=True)
        return None if res is None else int(res) / _US

    # -- records -----------------------------------------------------------------------------

    async def get(self, key: str) -> Record | None:
        check_name("record key", key)
        client = self._require()
        value, version = await self._call(
            "get",
            lambda: client.hmget(f"{self._prefix}r:{key}", ["value", "version"]),
            idempotent=True,
        )
        if not isinstance(value, bytes) or version is None:
            return None
        return Record(key, value, int(version))

    async def list(self, prefix: str = "") -> tuple[list[Record], Position]:
        lo, hi = _lex_range(prefix)
        res = await self._run("list", [lo, hi], idempotent=True)
        incarnation, revision = _text(res[0]), int(res[1])
        records = [
            Record(_text(res[i]), bytes(res[i + 1]), int(res[i + 2])) for i in range(2, len(res), 3)
        ]
        return records, make_position(incarnation, revision)

    async def txn(self, ops: Sequence[Op], conditions: Sequence[Condition] = ()) -> TxnResult:
        check_ops(ops, conditions)
        args: list[str | bytes] = [str(len(conditions))]
        for cond in conditions:
            if isinstance(cond, VersionIs):
                args += ["v", check_name("record key", cond.key), str(int(cond.version)), ""]
            elif isinstance(cond, LeaseHeld):
                check_name("lease name", cond.name)
                check_name("holder", cond.holder)
                args += ["l", cond.name, cond.holder, str(int(cond.epoch))]
            else:
                raise ConfigError(f"unknown transaction condition {cond!r}")
        for op in ops:
            if isinstance(op, Put):
                args += ["p", op.key, op.value]
            elif isinstance(op, Delete):
                args += ["d", op.key, ""]
            else:
                raise ConfigError(f"unknown transaction operation {op!r}")
        res = await self._run("txn", args, idempotent=False)
        if int(res[0]) == 1:
            return TxnResult(ok=True, revision=int(res[1]))
        failed = tuple(conditions[int(i)] for i in res[1:])
        return TxnResult(ok=False, revision=None, failed=failed)

    # -- change feed -------------------------------------------------------------------------

    async def head(self) -> Position:
        res = await self._run("head", [], idempotent=True)
        return make_position(_text(res[0]), int(res[1]))

    async def _changes_after(
        self, incarnation: str, revision: int, prefix: str, limit: int
    ) -> tuple[builtins.list[Change], int]:
        res = await self._run(
            "changes",
            [incarnation, str(revision), prefix, str(max(limit, 1))],
            idempotent=True,
        )
        if res[0] == b"compacted":
            raise FeedCompacted(
                f"change-feed position {make_position(incarnation, revision)!r} is no longer "
                f"available in Redis store {self.url}: {_text(res[1])}; re-read with list() and "
                "watch from the position it returns"
            )
        changes = [self._change(incarnation, entry_id, fields) for entry_id, fields in res[2:]]
        return changes, int(res[1])

    @staticmethod
    def _change(incarnation: str, entry_id: bytes, fields: Sequence[bytes]) -> Change:
        data = dict(zip(fields[::2], fields[1::2], strict=True))
        revision = int(entry_id.split(b"-", 1)[0])
        version = data.get(b"ver")
        holder = data.get(b"h")
        epoch = data.get(b"e")
        successor = data.get(b"s")
        return Change(
            position=make_position(incarnation, revision),
            revision=revision,
            kind=ChangeKind(_text(data[b"k"])),
            key=_text(data[b"n"]),
            value=data.get(b"v"),
            version=None if version is None else int(version),
            holder=None if holder is None else _text(holder),
            epoch=None if epoch is None else int(epoch),
            successor=None if successor is None else _text(successor),
        )

    async def _subscribe(self, pubsub: PubSub) -> None:
        await pubsub.subscribe(self._channel)
        # SUBSCRIBE travels on its own connection: wait for its confirmation, so that any write
        # after the watcher's first read is sure to be notified.
        async with asyncio.timeout(SOCKET_TIMEOUT):
            while True:
                msg = await pubsub.get_message(timeout=SOCKET_TIMEOUT)
                if msg is not None and msg["type"] in ("subscribe", b"subscribe"):
                    return

    @contextlib.asynccontextmanager
    async def _listen(self) -> AsyncIterator[FeedListener]:
        if self._feed_client is None:
            raise self._not_connected()
        pubsub = self._feed_client.pubsub()
        try:
            try:
                await _cancellable(self._subscribe(pubsub))
            except TimeoutError as exc:
                raise self._error("subscribing to change notifications", exc) from exc
            except (RedisError, OSError) as exc:
                raise self._error("subscribing to change notifications", exc) from exc
            yield _PubSubListener(self, pubsub)
        finally:
            # PubSub.aclose is not annotated in redis-py; bind it to a typed name to call it.
            aclose: Callable[[], Awaitable[None]] = pubsub.aclose
            # Shielded: a watcher cancelled while closing still returns its connection.
            closing = asyncio.ensure_future(aclose())
            closing.add_done_callback(_collect)
            with contextlib.suppress(RedisError, OSError):
                await asyncio.shield(closing)


__all__ = ["RedisStore"]
