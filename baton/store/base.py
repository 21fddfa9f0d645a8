"""The coordination-store contract: leases with fencing epochs, versioned records, a change feed.

Every backend (``sqlite.py``, ``redis.py``, ``postgres.py``, ``etcd.py``) implements
:class:`Store` and passes the one conformance suite in ``tests/conformance`` against a real
server. The core of baton only ever sees this module; it never imports a driver.

Semantics every backend guarantees
----------------------------------
*Time.* Lease expiry is judged by the **store's** clock (:meth:`Store.now`), never a client's.

*Leases.* ``acquire(name, holder, ttl)`` succeeds only when nobody holds ``name`` (never held,
released, or expired by the store clock) and it is not reserved for another holder. It returns a
:class:`Lease` whose ``epoch`` is the fencing token. Holding a lease does not make ``acquire``
succeed again for the same holder: a restarted process must wait for its old lease to expire,
because the old incarnation may still be running.

*Epochs.* The epoch of a name is strictly greater than every earlier epoch of that name, across
releases, expiries, client restarts, server restarts, and even a store that lost its data (Redis
without persistence, or promoted from a lagging replica). Every backend computes it in the same
atomic write that grants the lease as::

    epoch = max(store_clock_in_microseconds, last_epoch_of_name + 1)

``last_epoch_of_name`` makes epochs strictly increasing while the store keeps its data; the clock
term keeps them increasing when it did not. The assumption this rests on: **the clock of whatever
server grants the next lease reads later than the clock of the server that granted the previous
one did when it granted it.** One server with a sane clock satisfies it trivially; after a Redis
failover it holds when the servers' clocks agree to within the failover time (NTP keeps them
within milliseconds; a failover takes seconds). More than a million grants of one name within a
single second would also outrun the clock; nothing in baton comes close.

*Epoch counters.* :meth:`Store.next_epochs` hands out epochs by the same rule from named
counters that are not leases (a placed group's term, see ``baton.placement``): a counter's next
epoch is ``max(store_clock_in_microseconds, last_epoch_of_counter + 1, floor)``, and its last
epoch is kept for good, so it survives whatever happens to the records that used it (a group
deleted and created again continues above every term it ever had). Counter names are their own
namespace: a counter and a lease of the same name do not share epochs.

*Renewal* of many leases of one holder is one round trip, keeps their epochs, and fails (``None``
for that name) if the lease expired by the store clock, was released, or is held at another epoch.

*Lapses.* When a lease stopped being held (its expiry by the store clock, or its release) is kept
until the name is acquired again (:meth:`Store.lapses`): a reader without history, like the CLI,
can tell a lease that lapsed a moment ago from one gone long ago.

*Revisions.* Every change gets its own store revision, one greater than the last, in commit
order; a transaction writing three keys takes three consecutive revisions, committed together.

*Records* are small byte values with a ``version``: the revision of the change that last wrote the
key, so versions of a key strictly increase. :meth:`Store.txn` applies several puts and deletes
atomically (all or nothing), only if every condition holds: :class:`VersionIs` (compare-and-set, 0
meaning absent) and :class:`LeaseHeld` (the writer still holds a lease at a given epoch: a fenced
write).

*Change feed.* Every mutation that matters to observers gets the next store revision and is
appended to a change log in the same atomic step: record puts and deletes, and lease
``acquired``, ``released`` and ``expired``. Renewals are not changes (a node renewing 10k leases
every two seconds must not flood the log). An ``expired`` change is written by the first client
that notices the expiry: every watcher does so at the moment the store's soonest expiry passes
(:meth:`Store.expire_due`), and ``acquire`` does so for the lease it takes over, so the log reads
``expired`` before ``acquired``. :meth:`Store.watch` yields changes under a key prefix in revision
order from a :data:`Position`, and raises :class:`~baton.errors.FeedCompacted` when that position
is no longer available (trimmed, or from a store that lost its data): re-list and resume.
"""

from __future__ import annotations

import abc
import builtins
import contextlib
import enum
import gc
from collections.abc import AsyncGenerator, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Self

from baton.errors import ConfigError, FeedCompacted

#: An opaque change-feed position: ``"<incarnation>:<revision>"``.
Position = str

#: How long a watcher waits without any notification before it re-reads the log anyway.
#: A safety net only; notifications normally wake it at once.
FEED_IDLE_RECHECK = 1.0

#: How many changes one read of the log returns at most.
FEED_READ_LIMIT = 1000


@dataclass(frozen=True, slots=True)
class Lease:
    """A held lease. ``epoch`` is the fencing token; ``expires_at`` is on the store's clock
    (seconds since the Unix epoch)."""

    name: str
    holder: str
    epoch: int
    ttl: float
    expires_at: float


@dataclass(frozen=True, slots=True)
class Lapse:
    """A lease that was held and is not now: ``at`` is when it stopped being held, on the
    store's clock (its expiry, or the moment it was released), and ``ttl`` the ttl it had."""

    name: str
    at: float
    ttl: float


@dataclass(frozen=True, slots=True)
class Record:
    """A small versioned value."""

    key: str
    value: bytes
    version: int


class ChangeKind(enum.StrEnum):
    """What a change-feed entry records."""

    PUT = "put"
    DELETE = "delete"
    ACQUIRED = "acquired"
    RELEASED = "released"
    EXPIRED = "expired"


@dataclass(frozen=True, slots=True)
class Change:
    """One entry of the change feed.

    For records: ``value`` and ``version`` (PUT) or ``version`` of the deleting write (DELETE).
    For leases: ``holder`` and ``epoch`` (the new holder for ACQUIRED; the one that let go for
    RELEASED and EXPIRED) and, for a handover, the named ``successor``.
    """

    position: Position
    revision: int
    kind: ChangeKind
    key: str
    value: bytes | None = None
    version: int | None = None
    holder: str | None = None
    epoch: int | None = None
    successor: str | None = None


@dataclass(frozen=True, slots=True)
class VersionIs:
    """Condition: ``key`` is at ``version`` (0 means the key does not exist)."""

    key: str
    version: int


@dataclass(frozen=True, slots=True)
class LeaseHeld:
    """Condition: ``holder`` holds lease ``name`` at ``epoch`` and it has not expired by the
    store clock. This is what makes a write fenced."""

    name: str
    holder: str
    epoch: int


Condition = VersionIs | LeaseHeld


@dataclass(frozen=True, slots=True)
class Put:
    """Operation: set ``key`` to ``value``."""

    key: str
    value: bytes


@dataclass(frozen=True, slots=True)
class Delete:
    """Operation: delete ``key`` (a no-op, and no change, when it does not exist)."""

    key: str


Op = Put | Delete


@dataclass(frozen=True, slots=True)
class TxnResult:
    """Outcome of :meth:`Store.txn`. ``ok`` is False when a condition did not hold; then nothing
    was written and ``failed`` lists the conditions that did not hold. ``revision`` is the
    highest revision the transaction wrote (the store's head revision if it changed nothing)."""

    ok: bool
    revision: int | None
    failed: tuple[Condition, ...] = ()


@dataclass(frozen=True, slots=True)
class Capabilities:
    """What a backend can promise, checked when a store is opened (see ``open_store``)."""

    multi_host: bool
    """Nodes on other hosts can share it (false for an SQLite file)."""
    durable: bool
    """Records and leases survive a server restart (false for Redis without persistence)."""


class FeedListener(abc.ABC):
    """A backend's way of waking a watcher when the change log grows."""

    @abc.abstractmethod
    async def wait(self, timeout: float) -> None:
        """Return when a change may have been appended, or after ``timeout`` seconds."""


class Store(abc.ABC):
    """A coordination store. Safe for concurrent use by many tasks of one event loop.

    Every method may raise :class:`~baton.errors.StoreUnavailable` or
    :class:`~baton.errors.StoreTimeout`; none returns a partial result. After such an error the
    outcome of a write is unknown (it may have been applied just before the connection broke):
    read back before retrying anything that is not idempotent. Epochs make this safe for leases:
    a lease granted to a caller that never heard of it simply expires.
    """

    #: The store URL with secrets removed, fit for logs and messages.
    url: str
    capabilities: Capabilities
    #: The server to use is named by a master file that a failover switch rewrites: a server
    #: that does not answer at connect time may be one the switch is replacing.
    follows_master_file: bool = False

    # -- lifecycle ---------------------------------------------------------------------------

    @abc.abstractmethod
    async def connect(self) -> None:
        """Connect and create the schema if needed. Idempotent."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Release connections. Leases are not released: that is the caller's decision."""

    async def __aenter__(self) -> Self:
        await self.connect()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    # -- time --------------------------------------------------------------------------------

    @abc.abstractmethod
    async def now(self) -> float:
        """The store's clock, in seconds since the Unix epoch."""

    # -- leases ------------------------------------------------------------------------------

    @abc.abstractmethod
    async def acquire(self, name: str, holder: str, ttl: float) -> Lease | None:
        """Take lease ``name`` for ``ttl`` seconds, or return None if it is held (or reserved
        for another holder by a handover)."""

    @abc.abstractmethod
    async def renew(self, holder: str, leases: Sequence[Lease]) -> dict[str, Lease | None]:
        """Renew every lease in ``leases`` (all held by ``holder``) in one round trip, each for
        the ``ttl`` of the given :class:`Lease` (which becomes the lease's ttl at the store).
        Returns, per name, the renewed lease or None if it was lost."""

    @abc.abstractmethod
    async def release(self, lease: Lease, *, successor: str | None = None) -> bool:
        """Give up ``lease`` if it is still held at its epoch (compare and delete). With
        ``successor``, the lease stays reserved for that holder for one ttl, so that only it can
        acquire it in that time (a planned handover). Returns whether it was released."""

    @abc.abstractmethod
    async def get_lease(self, name: str) -> Lease | None:
        """The current holder of ``name``, or None if nobody holds it by the store clock."""

    @abc.abstractmethod
    async def list_leases(self, prefix: str = "") -> list[Lease]:
        """Every held lease whose name starts with ``prefix``, sorted by name."""

    @abc.abstractmethod
    async def lapses(self, names: Sequence[str]) -> dict[str, Lapse]:
        """When each of ``names`` that is not held now stopped being held (see :class:`Lapse`),
        so that a reader without history can tell a lease that just lapsed from one gone
        long ago. Kept until the name is acquired again; names held now or never held are
        left out, and so are lapses the store lost (a restart without persistence)."""

    @abc.abstractmethod
    async def expire_due(self) -> float | None:
        """Write an ``expired`` change for every lease past its expiry that has not had one yet,
        then return the seconds until the next lease expiry (None when no lease is held)."""

    @abc.abstractmethod
    async def next_epochs(self, floors: Mapping[str, int]) -> dict[str, int]:
        """Take the next epoch of every counter named in ``floors``, all in one atomic round
        trip: ``max(store clock in microseconds, the counter's last epoch + 1, floor)``, which
        becomes the counter's last epoch. An epoch taken and never used is simply skipped, so a
        caller may take epochs before a write that then fails. Not a change (the feed does not
        show it), like a renewal."""

    # -- records -----------------------------------------------------------------------------

    @abc.abstractmethod
    async def get(self, key: str) -> Record | None:
        """The record at ``key``, or None."""

    @abc.abstractmethod
    async def list(self, prefix: str = "") -> tuple[list[Record], Position]:
        """Every record under ``prefix`` sorted by key, and the feed position they are current
        at: watch from there to follow them without a gap."""

    @abc.abstractmethod
    async def txn(self, ops: Sequence[Op], conditions: Sequence[Condition] = ()) -> TxnResult:
        """Apply ``ops`` atomically if every condition holds (one revision per change)."""

    async def put(
        self,
        key: str,
        value: bytes,
        *,
        version: int | None = None,
        lease: Lease | None = None,
    ) -> TxnResult:
        """Put one record, optionally only at ``version`` (0: only if absent) and only while
        ``lease`` is held at its epoch."""
        conditions: list[Condition] = []
        if version is not None:
            conditions.append(VersionIs(key, version))
        if lease is not None:
            conditions.append(LeaseHeld(lease.name, lease.holder, lease.epoch))
        return await self.txn([Put(key, value)], conditions)

    async def delete(
        self, key: str, *, version: int | None = None, lease: Lease | None = None
    ) -> TxnResult:
        """Delete one record, with the same optional conditions as :meth:`put`."""
        conditions: list[Condition] = []
        if version is not None:
            conditions.append(VersionIs(key, version))
        if lease is not None:
            conditions.append(LeaseHeld(lease.name, lease.holder, lease.epoch))
        return await self.txn([Delete(key)], conditions)

    # -- change feed -------------------------------------------------------------------------

    @abc.abstractmethod
    async def head(self) -> Position:
        """The position of the newest change (watch from here to see only what comes next)."""

    @abc.abstractmethod
    async def _changes_after(
        self, incarnation: str, revision: int, prefix: str, limit: int
    ) -> tuple[builtins.list[Change], int]:
        """Changes with a revision above ``revision`` whose key starts with ``prefix``, oldest
        first, at most ``limit`` scanned, and the highest revision scanned (the new resume
        point even when nothing matched). Raises FeedCompacted when ``incarnation`` is not the
        store's or changes after ``revision`` were already trimmed."""

    @abc.abstractmethod
    def _listen(self) -> contextlib.AbstractAsyncContextManager[FeedListener]:
        """A listener that wakes on appends. Entered before the first read, so that no append
        between a read and the wait can be missed."""

    async def watch(
        self, prefix: str = "", since: Position | None = None
    ) -> AsyncGenerator[Change, None]:
        """Yield every change under ``prefix`` after ``since`` (default: from now), in order,
        forever. Also drives lease expiry: it wakes when the store's soonest lease expiry is due
        and writes the ``expired`` changes (see :meth:`expire_due`)."""
        async with self._listen() as listener:
            incarnation, revision = parse_position(since or await self.head())
            while True:
                changes, revision = await self._changes_after(
                    incarnation, revision, prefix, FEED_READ_LIMIT
                )
                for change in changes:
                    yield change
                if changes:
                    continue
                due = await self.expire_due()
                if due is not None and due <= 0:
                    continue
                wait = FEED_IDLE_RECHECK if due is None else min(due, FEED_IDLE_RECHECK)
                await listener.wait(wait)


@contextlib.contextmanager
def bulk_allocation() -> Iterator[None]:
    """Hold off the cyclic garbage collector while building many small objects (a renewal of
    100k leases): with a large heap, the collections those allocations trigger cost more than
    the objects themselves. Use it only around code that does not await."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def make_position(incarnation: str, revision: int) -> Position:
    """Build a change-feed position."""
    return f"{incarnation}:{revision}"


def parse_position(position: Position) -> tuple[str, int]:
    """Split a change-feed position; a malformed one is a :class:`ConfigError`."""
    incarnation, sep, rev = position.rpartition(":")
    if not sep or not incarnation or not rev.isdigit():
        raise ConfigError(
            f"bad change-feed position {position!r}: expected '<incarnation>:<revision>' as "
            "returned by head(), list() or a Change"
        )
    return incarnation, int(rev)


def check_name(kind: str, name: str) -> str:
    """Validate a lease name, holder or record key: non-empty printable text up to 512 chars."""
    if not isinstance(name, str) or not name or len(name) > 512 or not name.isprintable():
        raise ConfigError(
            f"bad {kind} {name!r}: use 1 to 512 printable characters (for example 'controller')"
        )
    return name


def check_names(kind: str, names: Sequence[str]) -> list[str]:
    """``names`` without repeats, in order, each checked by :func:`check_name`."""
    wanted = list(dict.fromkeys(names))
    for name in wanted:
        check_name(kind, name)
    return wanted


def check_ttl(ttl: float) -> float:
    """Validate a lease ttl in seconds (1 ms to one day)."""
    if isinstance(ttl, bool) or not isinstance(ttl, int | float) or not 0.001 <= ttl <= 86400:
        raise ConfigError(f"bad ttl {ttl!r}: use a number of seconds between 0.001 and 86400")
    return float(ttl)


def check_same_holder(holder: str, leases: Iterable[Lease]) -> list[Lease]:
    """Renewal is per holder: refuse a batch that mixes holders."""
    out = list(leases)
    for lease in out:
        if lease.holder != holder:
            raise ConfigError(
                f"cannot renew lease {lease.name!r} of holder {lease.holder!r} as {holder!r}: "
                "renew each holder's leases separately"
            )
    return out


def check_floors(floors: Mapping[str, int]) -> dict[str, int]:
    """Validate the counters and floors of :meth:`Store.next_epochs`."""
    out: dict[str, int] = {}
    for name, floor in floors.items():
        check_name("epoch counter name", name)
        # 2**53: exact in every backend (Redis scripts compute in doubles) and in JSON.
        if isinstance(floor, bool) or not isinstance(floor, int) or not 0 <= floor <= 2**53:
            raise ConfigError(
                f"bad floor {floor!r} for epoch counter {name!r}: use an integer from 0 to 2**53"
            )
        out[name] = floor
    return out


def check_ops(ops: Sequence[Op], conditions: Sequence[Condition]) -> None:
    """Validate a transaction before it reaches the store."""
    if not ops:
        raise ConfigError("empty transaction: give at least one Put or Delete")
    keys = [op.key for op in ops]
    if len(set(keys)) != len(keys):
        raise ConfigError(f"transaction writes a key twice: {sorted(keys)}; write each once")
    for op in ops:
        check_name("record key", op.key)
        if isinstance(op, Put) and not isinstance(op.value, bytes):
            raise ConfigError(f"value for {op.key!r} must be bytes, not {type(op.value).__name__}")
    for cond in conditions:
        if isinstance(cond, VersionIs) and cond.version < 0:
            raise ConfigError(f"version condition on {cond.key!r} must be >= 0")


__all__ = [
    "FEED_IDLE_RECHECK",
    "Capabilities",
    "Change",
    "ChangeKind",
    "Condition",
    "Delete",
    "FeedCompacted",
    "FeedListener",
    "Lease",
    "LeaseHeld",
    "Op",
    "Position",
    "Put",
    "Record",
    "Store",
    "TxnResult",
    "VersionIs",
    "make_position",
    "parse_position",
]
