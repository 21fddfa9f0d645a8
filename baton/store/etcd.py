"""The etcd backend of the coordination store (etcd 3.4+, through its v3 JSON gateway).

URL: ``etcd://[user:password@]host:port[,host:port...]/prefix[?cacert=/ca.pem]`` (``etcds://``
for TLS). Every key lives under ``<prefix>/<namespace>/``; the prefix holds a marker key
``<prefix>/.baton``, written when a store is first opened on an empty prefix, so that a URL
pointing at someone else's keys (Kubernetes' ``/registry``) is refused before anything is written.

How each guarantee of :mod:`baton.store.base` holds on etcd
-----------------------------------------------------------
*The store's clock* is the etcd member's wall clock, read from the ``Date`` header of its
answers and narrowed to about a round trip (:class:`~baton.store.etcd_gateway.ServerClock`). It
reads the lower bound of what the member's clock can be, so a lease is never judged expired before
the member's clock passed its expiry. etcd's own leases are not used: their TTLs are whole seconds
with a floor of about 2 s, they expire silently (no ``expired`` change could be logged), and the
revoke runs only every 500 ms.

*Atomicity.* Every operation reads what it needs in one read-only transaction, decides, then
writes in one transaction that compares the ``mod_revision`` of every key it read: if anything it
read changed meanwhile, nothing is written and the operation starts again from the read. Every
change-writing operation also compares the revision counter key, so changes commit one at a time,
in the order of their revisions.

*Revisions* are baton's own counter (the key ``rev``): etcd gives a whole transaction one
revision, while the contract wants one per change. The change log is one key per revision,
written in the same etcd transaction as the change it records.

*Epochs* are ``max(clock in microseconds, last + 1)`` with the last epoch of each name kept in
``epoch/<name>`` for good. A cluster that lost its data (restored from an old snapshot, or
recreated) starts a new incarnation; the clock term keeps epochs above every earlier one as long
as the restore takes longer than the clock's uncertainty (milliseconds).

*Renewal* of many leases is one request per 128 leases (etcd's default ``--max-txn-ops``), all
sent at once: each lease is a nested transaction that compares its holder and epoch and that its
expiry is still ahead of the clock, so one lost lease does not fail the others.

*Fenced writes.* :class:`~baton.store.base.LeaseHeld` is checked when read and again inside the
writing transaction (holder and epoch unchanged, expiry still ahead of the clock as the request
leaves): a write can only land while the lease is held, up to one network latency.

*The change feed* reads the log keys; watchers are woken by an etcd watch on the counter key, so
they learn of a change within a round trip. The log keeps about ``log_limit`` changes: older
positions raise :class:`~baton.errors.FeedCompacted`, as do positions of another incarnation and
positions ahead of the counter (a cluster that went back in time).

Keys under ``<prefix>/<namespace>/``:

=====================  ======================================================================
``inc``                random id of this data set (the incarnation of every position)
``rev``                the revision counter, decimal
``floor``              the lowest revision the log still holds
``log/<revision>``     one change, JSON; revisions zero-padded to 20 digits so keys sort
``lease/<name>``       ``holder\\nepoch`` of a held lease (until its expiry is logged)
``exp/<name>``         ``<expiry us, 20 digits> <ttl us>``: byte order is expiry order, so
                       etcd sorts leases by expiry and compares them against the clock
``epoch/<name>``       the last epoch granted for the name; never deleted
``counter/<name>``     the last epoch of an epoch counter; never deleted
``lapse/<name>``       ``<at us> <ttl us>`` of a lease that stopped being held
``handover/<name>``    ``successor\\nuntil us`` of a lease released to a named successor
``rec/<key>``          a record: its version, 20 digits, then the value's bytes
=====================  ======================================================================
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import json
import secrets
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from baton.errors import ConfigError, FeedCompacted, StoreError, StoreUnavailable
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
    check_floors,
    check_name,
    check_names,
    check_ops,
    check_same_holder,
    check_ttl,
    make_position,
)
from baton.store.etcd_gateway import JSON, Gateway, b64, parse_url, prefix_end, txn_ops, unb64

#: Changes kept in the log; older ones are deleted every ``TRIM_EVERY`` revisions.
LOG_LIMIT: Final = 100_000
TRIM_EVERY: Final = 1000
#: Leases per renewal request (each is a nested transaction of one put).
RENEW_CHUNK: Final = 128
#: Leases whose expiry one ``expire_due`` transaction logs (four operations each).
EXPIRE_BATCH: Final = 30
#: Keys read per read-only transaction (etcd's default ``--max-txn-ops`` is 128).
READ_CHUNK: Final = 120
#: Attempts of one operation that keeps losing to concurrent writers before giving up.
MAX_ATTEMPTS: Final = 200
MARKER_VALUE: Final = b"baton coordination store"

_US = 1_000_000


def _pad(n: int) -> str:
    return f"{n:020d}"


@dataclass(slots=True)
class _View:
    """One consistent read: the counter, the incarnation and the keys asked for."""

    rev: int = 0
    inc: str | None = None
    values: dict[str, bytes] = field(default_factory=dict)
    #: ``mod_revision`` of every key read, 0 when absent: what the write compares.
    mods: dict[str, int] = field(default_factory=dict)
    ranges: list[list[tuple[str, bytes]]] = field(default_factory=list)


class _WatchListener(FeedListener):
    """Wakes a watcher when etcd reports a write of the revision counter."""

    def __init__(self, store: EtcdStore) -> None:
        self._store = store
        self._woken = asyncio.Event()
        self._failure: StoreError | None = None
        self._ready = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._task = asyncio.ensure_future(self._run())
        ready = asyncio.ensure_future(self._ready.wait())
        await asyncio.wait([ready, self._task], return_when=asyncio.FIRST_COMPLETED)
        ready.cancel()
        if self._failure is not None:
            raise self._failure
        if not self._ready.is_set():
            raise StoreUnavailable(f"etcd store {self._store.url} closed the watch at once")

    async def _run(self) -> None:
        create = {"key": b64(self._store._key("rev"))}
        try:
            async with self._store._gateway().watch_lines(create) as lines:
                async for line in lines:
                    if not line.strip():
                        continue
                    result = json.loads(line).get("result", {})
                    if result.get("created"):
                        self._ready.set()
                    if result.get("events") or result.get("canceled"):
                        self._woken.set()
            raise StoreUnavailable(f"etcd store {self._store.url} ended the watch stream")
        except StoreError as exc:
            self._failure = exc
        except (ValueError, OSError) as exc:
            self._failure = StoreUnavailable(f"etcd store {self._store.url} watch broke: {exc}")
        self._woken.set()

    async def wait(self, timeout: float) -> None:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(max(timeout, 0.0)):
                await self._woken.wait()
        self._woken.clear()
        if self._failure is not None:
            raise self._failure

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, StoreError):
                await self._task


class EtcdStore(Store):
    """A :class:`~baton.store.base.Store` in etcd v3 (see the module docstring)."""

    capabilities = Capabilities(multi_host=True, durable=True)

    def __init__(self, url: str, *, namespace: str = "baton", log_limit: int = LOG_LIMIT) -> None:
        self._target = parse_url(url)
        self.url = self._target.display
        if log_limit < 1:
            raise ConfigError(f"bad log_limit {log_limit!r}: keep at least 1 change-log entry")
        self._log_limit = log_limit
        self._root = f"{self._target.prefix}/{namespace}/"
        self._gw: Gateway | None = None
        self._calibration: asyncio.Task[None] | None = None
        self._connect_lock = asyncio.Lock()

    def _key(self, *parts: str) -> str:
        return self._root + "/".join(parts)

    def _gateway(self) -> Gateway:
        if self._gw is None:
            raise StoreUnavailable(
                f"etcd store {self.url} is not connected: call connect() or use 'async with'"
            )
        return self._gw

    def _now_us(self) -> int:
        return int(self._gateway().clock.now() * _US)

    # -- lifecycle -----------------------------------------------------------------------------

    async def connect(self) -> None:
        """Reach a member, check its version and credentials and the key prefix."""
        async with self._connect_lock:
            if self._gw is not None:
                return
            gw = Gateway(self._target)
            try:
                await gw.open()
                self._gw = gw
                await self._check_prefix()
            except BaseException:
                self._gw = None
                await gw.aclose()
                raise
            self._calibration = asyncio.ensure_future(gw.calibrate())

    async def _check_prefix(self) -> None:
        """Refuse a prefix that holds keys that are not baton's; mark an empty one as baton's."""
        prefix = self._target.prefix + "/"
        marker = self._target.prefix + "/.baton"
        gw = self._gateway()
        got = await gw.post("/v3/kv/range", {"key": b64(marker)}, idempotent=True)
        if got.get("kvs"):
            return
        some = await gw.post(
            "/v3/kv/range",
            {"key": b64(prefix), "range_end": prefix_end(prefix), "limit": 1, "keys_only": True},
            idempotent=True,
        )
        if some.get("kvs"):
            found = unb64(some["kvs"][0]["key"]).decode(errors="replace")
            raise ConfigError(
                f"etcd store {self.url}: the prefix {self._target.prefix!r} holds keys that are "
                f"not baton's (for example {found!r}); check the prefix in the store URL"
            )
        await gw.post(
            "/v3/kv/txn",
            {
                "compare": [_absent(marker)],
                "success": [{"request_put": {"key": b64(marker), "value": b64(MARKER_VALUE)}}],
            },
            idempotent=True,
        )

    async def close(self) -> None:
        async with self._connect_lock:
            gw, self._gw = self._gw, None
            if self._calibration is not None:
                self._calibration.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await self._calibration
                self._calibration = None
            if gw is not None:
                await gw.aclose()

    # -- reading and committing ----------------------------------------------------------------

    async def _read(self, keys: Sequence[str] = (), ranges: Sequence[JSON] = ()) -> _View:
        """Read the counter, the incarnation, ``keys`` and ``ranges`` at one etcd revision."""
        wanted = [self._key("rev"), self._key("inc"), *dict.fromkeys(keys)]
        if len(wanted) + len(ranges) > READ_CHUNK:
            raise ConfigError(
                f"an etcd store operation may read at most {READ_CHUNK} keys, not "
                f"{len(wanted) + len(ranges)}: split it"
            )
        ops = [{"request_range": {"key": b64(k)}} for k in wanted]
        ops += [{"request_range": r} for r in ranges]
        res = await self._gateway().post("/v3/kv/txn", {"success": ops}, idempotent=True)
        view = _View()
        answers = res.get("responses", [])
        for key, answer in zip(wanted, answers, strict=False):
            kvs = answer.get("response_range", {}).get("kvs", [])
            view.mods[key] = int(kvs[0].get("mod_revision", 0)) if kvs else 0
            if kvs:
                view.values[key] = unb64(kvs[0].get("value"))
        for answer in answers[len(wanted) :]:
            kvs = answer.get("response_range", {}).get("kvs", [])
            view.ranges.append([(unb64(kv["key"]).decode(), unb64(kv.get("value"))) for kv in kvs])
        raw_rev = view.values.get(self._key("rev"))
        view.rev = int(raw_rev) if raw_rev else 0
        raw_inc = view.values.get(self._key("inc"))
        view.inc = raw_inc.decode() if raw_inc else None
        return view

    async def _commit(
        self,
        view: _View,
        writes: Sequence[JSON],
        changes: Sequence[JSON] = (),
        compares: Sequence[JSON] = (),
    ) -> bool:
        """Write ``writes`` and log ``changes`` (revisions ``view.rev + 1...``) if nothing
        ``view`` read changed meanwhile. Returns whether it was written."""
        cmp = [_mod_is(k, m) for k, m in view.mods.items() if changes or k != self._key("rev")]
        cmp += compares
        ops = list(writes)
        inc = view.inc or secrets.token_hex(8)
        if view.inc is None:
            ops.append(_put(self._key("inc"), inc))
        if changes:
            rev = view.rev
            for change in changes:
                rev += 1
                ops.append(_put(self._key("log", _pad(rev)), json.dumps(change)))
            ops.append(_put(self._key("rev"), str(rev)))
            if rev // TRIM_EVERY > view.rev // TRIM_EVERY and rev > self._log_limit:
                floor = rev - self._log_limit + 1
                low, high = self._key("log", _pad(0)), self._key("log", _pad(floor))
                ops.append({"request_delete_range": {"key": b64(low), "range_end": b64(high)}})
                ops.append(_put(self._key("floor"), str(floor)))
        body = {"compare": txn_ops(cmp), "success": txn_ops(ops)}
        res = await self._gateway().post("/v3/kv/txn", body, idempotent=False)
        return bool(res.get("succeeded"))

    async def _retry_pause(self, attempt: int) -> None:
        """Another writer won the race: let it finish before reading again."""
        if attempt >= MAX_ATTEMPTS - 1:
            raise StoreUnavailable(
                f"etcd store {self.url}: gave up after {MAX_ATTEMPTS} attempts lost to "
                "concurrent writers; retry later"
            )
        await asyncio.sleep(0.001 * min(attempt, 20) * secrets.randbelow(100) / 100)

    # -- time ----------------------------------------------------------------------------------

    async def now(self) -> float:
        """The member's clock (see the module docstring), refreshed by one answer."""
        await self._gateway().post("/v3/maintenance/status", {}, idempotent=True)
        return self._gateway().clock.now()

    # -- leases --------------------------------------------------------------------------------

    def _lease_keys(self, name: str) -> tuple[str, str]:
        return self._key("lease", name), self._key("exp", name)

    async def acquire(self, name: str, holder: str, ttl: float) -> Lease | None:
        check_name("lease name", name)
        check_name("holder", holder)
        seconds = check_ttl(ttl)
        ttl_us = round(seconds * _US)
        lk, xk = self._lease_keys(name)
        ek, hk = self._key("epoch", name), self._key("handover", name)
        for attempt in range(MAX_ATTEMPTS):
            view = await self._read([lk, xk, ek, hk])
            now = self._now_us()
            changes: list[JSON] = []
            if lk in view.values:
                exp, _ = _exp(view.values.get(xk))
                if exp > now:
                    return None
                # Expired by the store clock but not logged yet: log it first, so the feed
                # reads "expired" before "acquired".
                old_holder, old_epoch = _identity(view.values[lk])
                changes.append(_change(ChangeKind.EXPIRED, name, h=old_holder, e=old_epoch))
            elif hk in view.values:
                successor, until = _handover(view.values[hk])
                if successor != holder and until > now:
                    return None
            epoch = max(now, int(view.values.get(ek, b"0")) + 1)
            changes.append(_change(ChangeKind.ACQUIRED, name, h=holder, e=epoch))
            writes = [
                _put(lk, f"{holder}\n{epoch}"),
                _put(xk, f"{_pad(now + ttl_us)} {ttl_us}"),
                _put(ek, str(epoch)),
                _delete(hk),
                _delete(self._key("lapse", name)),
            ]
            if await self._commit(view, writes, changes):
                return Lease(name, holder, epoch, seconds, (now + ttl_us) / _US)
            await self._retry_pause(attempt)
        raise AssertionError("unreachable")  # pragma: no cover

    async def renew(self, holder: str, leases: Sequence[Lease]) -> dict[str, Lease | None]:
        """Renew ``leases`` of ``holder``: one request per :data:`RENEW_CHUNK` leases, sent
        together, each lease its own nested transaction (see the module docstring)."""
        check_name("holder", holder)
        batch = list({lease.name: lease for lease in check_same_holder(holder, leases)}.values())
        for lease in batch:
            check_name("lease name", lease.name)
            check_ttl(lease.ttl)
        if not batch:
            return {}
        chunks = [batch[i : i + RENEW_CHUNK] for i in range(0, len(batch), RENEW_CHUNK)]
        answers = await asyncio.gather(*(self._renew_chunk(holder, c) for c in chunks))
        return {name: lease for answer in answers for name, lease in answer.items()}

    async def _renew_chunk(self, holder: str, chunk: Sequence[Lease]) -> dict[str, Lease | None]:
        now = self._now_us()
        nested = []
        for lease in chunk:
            lk, xk = self._lease_keys(lease.name)
            ttl_us = round(lease.ttl * _US)
            nested.append(
                {
                    "request_txn": {
                        "compare": [
                            _value_is(lk, f"{holder}\n{lease.epoch}"),
                            _value_above(xk, _pad(now)),
                        ],
                        "success": [_put(xk, f"{_pad(now + ttl_us)} {ttl_us}")],
                    }
                }
            )
        res = await self._gateway().post("/v3/kv/txn", {"success": nested}, idempotent=True)
        out: dict[str, Lease | None] = {}
        answers = res.get("responses", [])
        for lease, answer in zip(chunk, answers, strict=True):
            ok = answer.get("response_txn", {}).get("succeeded", False)
            at = (now + round(lease.ttl * _US)) / _US
            out[lease.name] = Lease(lease.name, holder, lease.epoch, lease.ttl, at) if ok else None
        return out

    async def release(self, lease: Lease, *, successor: str | None = None) -> bool:
        check_name("lease name", lease.name)
        check_name("holder", lease.holder)
        if successor is not None:
            check_name("successor", successor)
        lk, xk = self._lease_keys(lease.name)
        for attempt in range(MAX_ATTEMPTS):
            view = await self._read([lk, xk])
            now = self._now_us()
            exp, ttl_us = _exp(view.values.get(xk))
            if lk not in view.values or exp <= now:
                return False
            if _identity(view.values[lk]) != (lease.holder, lease.epoch):
                return False
            writes = [
                _delete(lk),
                _delete(xk),
                _put(self._key("lapse", lease.name), f"{now} {ttl_us}"),
            ]
            extra: dict[str, Any] = {"h": lease.holder, "e": lease.epoch}
            if successor is not None:
                writes.append(
                    _put(self._key("handover", lease.name), f"{successor}\n{now + ttl_us}")
                )
                extra["s"] = successor
            if await self._commit(
                view, writes, [_change(ChangeKind.RELEASED, lease.name, **extra)]
            ):
                return True
            await self._retry_pause(attempt)
        raise AssertionError("unreachable")  # pragma: no cover

    async def get_lease(self, name: str) -> Lease | None:
        check_name("lease name", name)
        lk, xk = self._lease_keys(name)
        view = await self._read([lk, xk])
        return self._held(name, view.values.get(lk), view.values.get(xk), self._now_us())

    @staticmethod
    def _held(name: str, ident: bytes | None, exp_raw: bytes | None, now: int) -> Lease | None:
        if ident is None or exp_raw is None:
            return None
        exp, ttl_us = _exp(exp_raw)
        if exp <= now:
            return None
        holder, epoch = _identity(ident)
        return Lease(name, holder, epoch, ttl_us / _US, exp / _US)

    async def list_leases(self, prefix: str = "") -> list[Lease]:
        lp, xp = self._lease_keys(prefix)
        view = await self._read(ranges=[_range(lp), _range(xp)])
        now = self._now_us()
        idents = {k[len(self._key("lease", "")) :]: v for k, v in view.ranges[0]}
        exps = {k[len(self._key("exp", "")) :]: v for k, v in view.ranges[1]}
        held = (self._held(n, idents[n], exps.get(n), now) for n in sorted(idents))
        return [lease for lease in held if lease is not None]

    async def lapses(self, names: Sequence[str]) -> dict[str, Lapse]:
        wanted = check_names("lease name", names)
        out: dict[str, Lapse] = {}
        step = READ_CHUNK // 3 - 1
        for i in range(0, len(wanted), step):
            chunk = wanted[i : i + step]
            keys = [k for n in chunk for k in (*self._lease_keys(n), self._key("lapse", n))]
            view = await self._read(keys)
            now = self._now_us()
            for name in chunk:
                lk, xk = self._lease_keys(name)
                if lk in view.values:
                    exp, ttl_us = _exp(view.values.get(xk))
                    if exp <= now:  # an expiry nobody logged yet is a lapse already
                        out[name] = Lapse(name, exp / _US, ttl_us / _US)
                    continue
                raw = view.values.get(self._key("lapse", name))
                if raw is not None:
                    at, ttl_us = (int(x) for x in raw.split())
                    out[name] = Lapse(name, at / _US, ttl_us / _US)
        return out

    async def expire_due(self) -> float | None:
        xp = self._key("exp", "")
        sorted_exps = {**_range(xp), "sort_order": "ASCEND", "sort_target": "VALUE"}
        soonest = await self._gateway().post(
            "/v3/kv/range", {**sorted_exps, "limit": EXPIRE_BATCH + 1}, idempotent=True
        )
        now = self._now_us()
        due: list[str] = []
        for kv in soonest.get("kvs", []):
            exp, _ = _exp(unb64(kv.get("value")))
            if exp > now:
                return (exp - now) / _US if not due else 0.0
            due.append(unb64(kv["key"]).decode()[len(xp) :])
        if not due:
            return None
        await self._expire(due[:EXPIRE_BATCH])
        return 0.0

    async def _expire(self, names: Sequence[str]) -> None:
        """Log the expiry of ``names`` (those still past it when read), oldest first."""
        keys = [k for n in names for k in self._lease_keys(n)]
        view = await self._read(keys)
        now = self._now_us()
        gone: list[tuple[int, str, int]] = []
        for name in names:
            lk, xk = self._lease_keys(name)
            exp, ttl_us = _exp(view.values.get(xk))
            if lk in view.values and exp <= now:
                gone.append((exp, name, ttl_us))
        writes: list[JSON] = []
        changes: list[JSON] = []
        for exp, name, ttl_us in sorted(gone):
            lk, xk = self._lease_keys(name)
            holder, epoch = _identity(view.values[lk])
            writes += [_delete(lk), _delete(xk), _put(self._key("lapse", name), f"{exp} {ttl_us}")]
            changes.append(_change(ChangeKind.EXPIRED, name, h=holder, e=epoch))
        # Lost to a concurrent writer (a renewal, or another watcher logging the same expiry):
        # the caller's next look sees the outcome.
        if changes:
            await self._commit(view, writes, changes)

    async def next_epochs(self, floors: Mapping[str, int]) -> dict[str, int]:
        wanted = check_floors(floors)
        if not wanted:
            return {}
        keys = {name: self._key("counter", name) for name in wanted}
        for attempt in range(MAX_ATTEMPTS):
            view = await self._read(list(keys.values()))
            now = self._now_us()
            out = {
                name: max(now, int(view.values.get(keys[name], b"0")) + 1, floor)
                for name, floor in wanted.items()
            }
            if await self._commit(view, [_put(keys[n], str(e)) for n, e in out.items()]):
                return out
            await self._retry_pause(attempt)
        raise AssertionError("unreachable")  # pragma: no cover

    # -- records -------------------------------------------------------------------------------

    async def get(self, key: str) -> Record | None:
        check_name("record key", key)
        res = await self._gateway().post(
            "/v3/kv/range", {"key": b64(self._key("rec", key))}, idempotent=True
        )
        kvs = res.get("kvs")
        return _record(key, unb64(kvs[0].get("value"))) if kvs else None

    async def list(self, prefix: str = "") -> tuple[builtins.list[Record], Position]:
        base = self._key("rec", "")
        view = await self._incarnated(ranges=[_range(self._key("rec", prefix))])
        records = [_record(k[len(base) :], v) for k, v in view.ranges[0]]
        return records, make_position(view.inc or "", view.rev)

    async def txn(self, ops: Sequence[Op], conditions: Sequence[Condition] = ()) -> TxnResult:
        check_ops(ops, conditions)
        keys: builtins.list[str] = []
        for cond in conditions:
            if isinstance(cond, VersionIs):
                keys.append(self._key("rec", check_name("record key", cond.key)))
            elif isinstance(cond, LeaseHeld):
                check_name("lease name", cond.name)
                check_name("holder", cond.holder)
                keys += self._lease_keys(cond.name)
            else:
                raise ConfigError(f"unknown transaction condition {cond!r}")
        for op in ops:
            if not isinstance(op, Put | Delete):
                raise ConfigError(f"unknown transaction operation {op!r}")
            keys.append(self._key("rec", op.key))
        for attempt in range(MAX_ATTEMPTS):
            view = await self._read(keys)
            failed = tuple(c for c in conditions if not self._holds(c, view))
            if failed:
                return TxnResult(ok=False, revision=None, failed=failed)
            writes: builtins.list[JSON] = []
            changes: builtins.list[JSON] = []
            rev = view.rev
            for op in ops:
                rk = self._key("rec", op.key)
                if isinstance(op, Put):
                    rev += 1
                    writes.append(_put(rk, _pad(rev).encode() + op.value))
                    changes.append(_change(ChangeKind.PUT, op.key, v=b64(op.value), ver=rev))
                elif rk in view.values:
                    rev += 1
                    writes.append(_delete(rk))
                    changes.append(_change(ChangeKind.DELETE, op.key, ver=rev))
            if not changes:
                return TxnResult(ok=True, revision=view.rev)
            # The fence, once more inside the write: the lease's expiry still ahead of the clock.
            now = _pad(self._now_us())
            fences = [
                _value_above(self._key("exp", c.name), now)
                for c in conditions
                if isinstance(c, LeaseHeld)
            ]
            if await self._commit(view, writes, changes, fences):
                return TxnResult(ok=True, revision=rev)
            await self._retry_pause(attempt)
        raise AssertionError("unreachable")  # pragma: no cover

    def _holds(self, cond: Condition, view: _View) -> bool:
        if isinstance(cond, VersionIs):
            raw = view.values.get(self._key("rec", cond.key))
            return (int(raw[:20]) if raw is not None else 0) == cond.version
        lk, xk = self._lease_keys(cond.name)
        held = self._held(cond.name, view.values.get(lk), view.values.get(xk), self._now_us())
        return held is not None and (held.holder, held.epoch) == (cond.holder, cond.epoch)

    # -- change feed ---------------------------------------------------------------------------

    async def _incarnated(self, ranges: Sequence[JSON] = ()) -> _View:
        """A read that also creates the incarnation of a fresh (or emptied) store."""
        view = await self._read(ranges=ranges)
        if view.inc is None:
            inc = self._key("inc")
            await self._gateway().post(
                "/v3/kv/txn",
                {"compare": [_absent(inc)], "success": [_put(inc, secrets.token_hex(8))]},
                idempotent=True,
            )
            view = await self._read(ranges=ranges)
        return view

    async def head(self) -> Position:
        view = await self._incarnated()
        return make_position(view.inc or "", view.rev)

    async def _changes_after(
        self, incarnation: str, revision: int, prefix: str, limit: int
    ) -> tuple[builtins.list[Change], int]:
        log = self._key("log", "")
        entries = {
            "key": b64(self._key("log", _pad(revision + 1))),
            "range_end": prefix_end(log),
            "limit": max(limit, 1),
        }
        view = await self._read([self._key("floor")], [entries])
        floor_raw = view.values.get(self._key("floor"))
        floor = int(floor_raw) if floor_raw else 0
        position = make_position(incarnation, revision)
        why = None
        if view.inc != incarnation:
            why = "it belongs to another incarnation of the store (its data was lost or reset)"
        elif revision > view.rev:
            why = f"it is ahead of the store's revision {view.rev} (the store lost changes)"
        elif revision + 1 < floor:
            why = f"changes before revision {floor} were trimmed from the log"
        if why:
            raise FeedCompacted(
                f"change-feed position {position!r} is no longer available in etcd store "
                f"{self.url}: {why}; re-read with list() and watch from the position it returns"
            )
        changes: builtins.list[Change] = []
        last = revision
        for key, raw in view.ranges[0]:
            last = int(key[len(log) :])
            entry = json.loads(raw)
            if entry["n"].startswith(prefix):
                changes.append(_decode_change(incarnation, last, entry))
        return changes, last

    @contextlib.asynccontextmanager
    async def _listen(self) -> AsyncIterator[FeedListener]:
        listener = _WatchListener(self)
        try:
            await listener.start()
            yield listener
        finally:
            await listener.stop()


# -- encodings -----------------------------------------------------------------------------------


def _put(key: str, value: str | bytes) -> JSON:
    return {"request_put": {"key": b64(key), "value": b64(value)}}


def _delete(key: str) -> JSON:
    return {"request_delete_range": {"key": b64(key)}}


def _range(prefix: str) -> JSON:
    return {"key": b64(prefix), "range_end": prefix_end(prefix)}


def _mod_is(key: str, mod: int) -> JSON:
    return {"key": b64(key), "target": "MOD", "result": "EQUAL", "mod_revision": str(mod)}


def _absent(key: str) -> JSON:
    return {"key": b64(key), "target": "CREATE", "result": "EQUAL", "create_revision": "0"}


def _value_is(key: str, value: str) -> JSON:
    return {"key": b64(key), "target": "VALUE", "result": "EQUAL", "value": b64(value)}


def _value_above(key: str, value: str) -> JSON:
    return {"key": b64(key), "target": "VALUE", "result": "GREATER", "value": b64(value)}


def _exp(raw: bytes | None) -> tuple[int, int]:
    """``(expiry us, ttl us)`` of an ``exp/`` value; a missing one counts as long expired."""
    if not raw:
        return 0, 0
    exp, ttl = raw.split()
    return int(exp), int(ttl)


def _identity(raw: bytes) -> tuple[str, int]:
    holder, _, epoch = raw.decode().rpartition("\n")
    return holder, int(epoch)


def _handover(raw: bytes) -> tuple[str, int]:
    successor, _, until = raw.decode().rpartition("\n")
    return successor, int(until)


def _record(key: str, raw: bytes) -> Record:
    return Record(key, raw[20:], int(raw[:20]))


def _change(kind: ChangeKind, name: str, **fields: Any) -> JSON:
    return {"k": kind.value, "n": name, **fields}


def _decode_change(incarnation: str, revision: int, entry: JSON) -> Change:
    value = entry.get("v")
    return Change(
        position=make_position(incarnation, revision),
        revision=revision,
        kind=ChangeKind(entry["k"]),
        key=entry["n"],
        value=None if value is None else unb64(value),
        version=entry.get("ver"),
        holder=entry.get("h"),
        epoch=entry.get("e"),
        successor=entry.get("s"),
    )


__all__ = ["EtcdStore"]
