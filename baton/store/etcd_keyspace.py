"""The etcd store's keyspace (:mod:`baton.store.etcd`): where its keys live, how values are
encoded, and :class:`Keyspace`, its optimistic read-then-commit transactions.

Every operation reads what it needs in one read-only transaction (:meth:`Keyspace.read`),
decides, and writes in one transaction (:meth:`Keyspace.commit`) that compares the
``mod_revision`` of every key it read: when anything it read changed meanwhile, nothing is written
and the operation starts again from the read. A write that logs changes also compares the
revision counter, so changes commit one at a time, in the order of their revisions, each with its
log entry in the same etcd transaction.

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
``bx/<name>``          the bundle of a bundled lease, in place of its ``exp/<name>``
``bnd/<id>``           a bundle's expiry, as ``exp/<name>`` (:mod:`baton.store.etcd_bundles`)
``bm/<id>/<name>``     empty: ``name`` is a member of bundle ``id``
``rec/<key>``          a record: its version, 20 digits, then the value's bytes
=====================  ======================================================================
"""

from __future__ import annotations

import asyncio
import json
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from baton.errors import ConfigError, FeedCompacted, StoreUnavailable
from baton.store.base import Change, ChangeKind, Op, Put, Record, make_position
from baton.store.etcd_gateway import JSON, Gateway, b64, prefix_end, txn_ops, unb64
from baton.store.etcd_tail import LogTail

#: Changes kept in the log; older ones are deleted every ``TRIM_EVERY`` revisions.
LOG_LIMIT: Final = 100_000
TRIM_EVERY: Final = 1000
#: Keys read per read-only transaction (etcd's default ``--max-txn-ops`` is 128).
READ_CHUNK: Final = 120
#: Attempts of one operation that keeps losing to concurrent writers before giving up.
MAX_ATTEMPTS: Final = 200
MARKER_VALUE: Final = b"baton coordination store"


@dataclass(slots=True)
class View:
    """One consistent read: the counter, the incarnation and the keys asked for."""

    rev: int = 0
    inc: str | None = None
    values: dict[str, bytes] = field(default_factory=dict)
    #: ``mod_revision`` of every key read, 0 when absent: what the write compares.
    mods: dict[str, int] = field(default_factory=dict)
    ranges: list[list[tuple[str, bytes]]] = field(default_factory=list)


class Keyspace:
    """One namespace of a store: its keys under ``root`` and its transactions."""

    def __init__(self, root: str, log_limit: int, url: str) -> None:
        if log_limit < 1:
            raise ConfigError(f"bad log_limit {log_limit!r}: keep at least 1 change-log entry")
        self.root = root
        self.log_limit = log_limit
        self.url = url
        self.gateway: Gateway | None = None
        #: Held by every read-then-commit of this store: its own tasks then take turns instead
        #: of failing each other's compares (64 concurrent acquires made 6 a second that way,
        #: against 140 in turn). Other clients still race, and the compares keep that safe.
        self.writing = asyncio.Lock()
        self._known: View | None = None
        #: The etcd revision of this store's last successful commit.
        self.committed = 0
        #: The log's newest entries, as this store's watches delivered them.
        self.tail = LogTail()

    def known(self) -> View | None:
        """The revision counter and incarnation as this store last saw them (``mods`` of those
        two keys only), or None: a write that compares them in place of a fresh read costs one
        round trip, and fails harmlessly when another client wrote meanwhile."""
        return self._known

    def _remember(self, rev: int, inc: str | None, rev_mod: int, inc_mod: int) -> None:
        if inc is None:
            self._known = None
            return
        self._known = View(
            rev=rev, inc=inc, mods={self.key("rev"): rev_mod, self.key("inc"): inc_mod}
        )

    def key(self, *parts: str) -> str:
        return self.root + "/".join(parts)

    def gw(self) -> Gateway:
        if self.gateway is None:
            raise StoreUnavailable(
                f"etcd store {self.url} is not connected: call connect() or use 'async with'"
            )
        return self.gateway

    async def read(self, keys: Sequence[str] = (), ranges: Sequence[JSON] = ()) -> View:
        """Read the counter, the incarnation, ``keys`` and ``ranges`` at one etcd revision."""
        wanted = [self.key("rev"), self.key("inc"), *dict.fromkeys(keys)]
        if len(wanted) + len(ranges) > READ_CHUNK:
            raise ConfigError(
                f"an etcd store operation may read at most {READ_CHUNK} keys, not "
                f"{len(wanted) + len(ranges)}: split it"
            )
        ops = [{"request_range": {"key": b64(k)}} for k in wanted]
        ops += [{"request_range": r} for r in ranges]
        res = await self.gw().post("/v3/kv/txn", {"success": ops}, idempotent=True)
        view = View()
        answers = res.get("responses", [])
        for key, answer in zip(wanted, answers, strict=False):
            kvs = answer.get("response_range", {}).get("kvs", [])
            view.mods[key] = int(kvs[0].get("mod_revision", 0)) if kvs else 0
            if kvs:
                view.values[key] = unb64(kvs[0].get("value"))
        for answer in answers[len(wanted) :]:
            kvs = answer.get("response_range", {}).get("kvs", [])
            view.ranges.append([(unb64(kv["key"]).decode(), unb64(kv.get("value"))) for kv in kvs])
        raw_rev = view.values.get(self.key("rev"))
        view.rev = int(raw_rev) if raw_rev else 0
        raw_inc = view.values.get(self.key("inc"))
        view.inc = raw_inc.decode() if raw_inc else None
        self._remember(view.rev, view.inc, view.mods[wanted[0]], view.mods[wanted[1]])
        return view

    async def incarnated(self, ranges: Sequence[JSON] = ()) -> View:
        """A read that also creates the incarnation of a fresh (or emptied) store."""
        view = await self.read(ranges=ranges)
        if view.inc is None:
            inc = self.key("inc")
            await self.gw().post(
                "/v3/kv/txn",
                {"compare": [absent(inc)], "success": [put(inc, secrets.token_hex(8))]},
                idempotent=True,
            )
            view = await self.read(ranges=ranges)
        return view

    async def commit(
        self,
        view: View,
        writes: Sequence[JSON],
        changes: Sequence[JSON] = (),
        compares: Sequence[JSON] = (),
    ) -> bool:
        """Write ``writes`` and log ``changes`` (revisions ``view.rev + 1...``) if nothing
        ``view`` read changed meanwhile. Returns whether it was written. The incarnation is
        created by any write that finds none (a store that lost its data)."""
        counter = self.key("rev")
        cmp = [mod_is(k, m) for k, m in view.mods.items() if changes or k != counter]
        cmp += compares
        ops = list(writes)
        inc = view.inc or secrets.token_hex(8)
        if view.inc is None:
            ops.append(put(self.key("inc"), inc))
        rev = view.rev
        if changes:
            for entry in changes:
                rev += 1
                ops.append(put(self.key("log", pad(rev)), json.dumps(entry)))
            ops.append(put(counter, str(rev)))
            if rev // TRIM_EVERY > view.rev // TRIM_EVERY and rev > self.log_limit:
                floor = rev - self.log_limit + 1
                low, high = self.key("log", pad(0)), self.key("log", pad(floor))
                ops.append({"request_delete_range": {"key": b64(low), "range_end": b64(high)}})
                ops.append(put(self.key("floor"), str(floor)))
        body = {"compare": txn_ops(cmp), "success": txn_ops(ops)}
        res = await self.gw().post("/v3/kv/txn", body, idempotent=False)
        if not res.get("succeeded"):
            self._known = None
            return False
        committed = self.committed = int(res.get("header", {}).get("revision", 0))
        inc_key = self.key("inc")
        rev_mod = committed if changes else view.mods.get(counter, 0)
        inc_mod = view.mods.get(inc_key, 0) if view.inc is not None else committed
        self._remember(rev, inc, rev_mod, inc_mod)
        return True

    def record_writes(
        self, ops: Sequence[Op], existing: Mapping[str, bytes], rev: int
    ) -> tuple[list[JSON], list[JSON], int]:
        """The writes and changes of record ``ops`` numbered from ``rev + 1``, and the last
        revision taken. A delete of a key not in ``existing`` is a no-op, and no change."""
        writes: list[JSON] = []
        changes: list[JSON] = []
        for op in ops:
            rk = self.key("rec", op.key)
            if isinstance(op, Put):
                rev += 1
                writes.append(put(rk, pad(rev).encode() + op.value))
                changes.append(change(ChangeKind.PUT, op.key, v=b64(op.value), ver=rev))
            elif rk in existing:
                rev += 1
                writes.append(delete(rk))
                changes.append(change(ChangeKind.DELETE, op.key, ver=rev))
        return writes, changes, rev

    async def changes_after(
        self, incarnation: str, revision: int, prefix: str, limit: int
    ) -> tuple[list[Change], int]:
        """The change feed's read (see :meth:`baton.store.base.Store._changes_after`)."""
        log = self.key("log", "")
        served = self.tail.after(incarnation, revision, max(limit, 1))
        if served is not None:
            found = [(revision, json.loads(raw)) for revision, raw in served]
            picked = [
                decode_change(incarnation, r, e) for r, e in found if e["n"].startswith(prefix)
            ]
            return picked, served[-1][0] if served else revision
        entries = {
            "key": b64(self.key("log", pad(revision + 1))),
            "range_end": prefix_end(log),
            "limit": max(limit, 1),
        }
        generation, live = self.tail.generation, self.tail.watches > 0
        view = await self.read([self.key("floor")], [entries])
        floor_raw = view.values.get(self.key("floor"))
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
        changes: list[Change] = []
        last = revision
        for key, raw in view.ranges[0]:
            last = int(key[len(log) :])
            entry = json.loads(raw)
            if entry["n"].startswith(prefix):
                changes.append(decode_change(incarnation, last, entry))
        if last == view.rev:
            self.tail.read_complete(incarnation, view.rev, generation, live)
        return changes, last

    async def retry_pause(self, attempt: int) -> None:
        """Another writer won the race: let it finish before reading again."""
        if attempt >= MAX_ATTEMPTS - 1:
            raise StoreUnavailable(
                f"etcd store {self.url}: gave up after {MAX_ATTEMPTS} attempts lost to "
                "concurrent writers; retry later"
            )
        await asyncio.sleep(0.001 * min(attempt, 20) * secrets.randbelow(100) / 100)


async def claim_prefix(gw: Gateway, prefix: str) -> None:
    """Refuse a key prefix that holds keys that are not baton's; mark an empty one as baton's
    (the marker ``<prefix>/.baton``). Writes nothing when it refuses."""
    marker = prefix + "/.baton"
    got = await gw.post("/v3/kv/range", {"key": b64(marker)}, idempotent=True)
    if got.get("kvs"):
        return
    some = await gw.post(
        "/v3/kv/range", {**key_range(prefix + "/"), "limit": 1, "keys_only": True}, idempotent=True
    )
    if some.get("kvs"):
        found = unb64(some["kvs"][0]["key"]).decode(errors="replace")
        raise ConfigError(
            f"etcd store {gw.target.display}: the prefix {prefix!r} holds keys that are not "
            f"baton's (for example {found!r}); check the prefix in the store URL"
        )
    await gw.post(
        "/v3/kv/txn",
        {"compare": [absent(marker)], "success": [put(marker, MARKER_VALUE)]},
        idempotent=True,
    )


def pad(n: int) -> str:
    """Revisions and times zero-padded to 20 digits: byte order is numeric order."""
    return f"{n:020d}"


def put(key: str, value: str | bytes) -> JSON:
    return {"request_put": {"key": b64(key), "value": b64(value)}}


def delete(key: str) -> JSON:
    return {"request_delete_range": {"key": b64(key)}}


def key_range(prefix: str) -> JSON:
    return {"key": b64(prefix), "range_end": prefix_end(prefix)}


def mod_is(key: str, mod: int) -> JSON:
    return {"key": b64(key), "target": "MOD", "result": "EQUAL", "mod_revision": str(mod)}


def absent(key: str) -> JSON:
    return {"key": b64(key), "target": "CREATE", "result": "EQUAL", "create_revision": "0"}


def value_is(key: str, value: str) -> JSON:
    return {"key": b64(key), "target": "VALUE", "result": "EQUAL", "value": b64(value)}


def value_above(key: str, value: str) -> JSON:
    return {"key": b64(key), "target": "VALUE", "result": "GREATER", "value": b64(value)}


def exp(raw: bytes | None) -> tuple[int, int]:
    """``(expiry us, ttl us)`` of an ``exp/`` value; a missing one counts as long expired."""
    if not raw:
        return 0, 0
    exp, ttl = raw.split()
    return int(exp), int(ttl)


def identity(raw: bytes) -> tuple[str, int]:
    holder, _, epoch = raw.decode().rpartition("\n")
    return holder, int(epoch)


def handover(raw: bytes) -> tuple[str, int]:
    successor, _, until = raw.decode().rpartition("\n")
    return successor, int(until)


def record(key: str, raw: bytes) -> Record:
    return Record(key, raw[20:], int(raw[:20]))


def change(kind: ChangeKind, name: str, **fields: Any) -> JSON:
    return {"k": kind.value, "n": name, **fields}


def decode_change(incarnation: str, revision: int, entry: JSON) -> Change:
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


__all__ = [
    "Keyspace",
    "View",
    "absent",
    "change",
    "claim_prefix",
    "decode_change",
    "delete",
    "exp",
    "handover",
    "identity",
    "key_range",
    "mod_is",
    "pad",
    "put",
    "record",
    "value_above",
    "value_is",
]  # fmt: skip
