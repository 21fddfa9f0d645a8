"""``compare``, ``repair`` and ``resync`` (seed 004): a node's table against its provider's, row
by row, at one tick, and the fewest changes that make them equal (or a copy made again).

**One tick, no long lock.** The node is paused first (its worker applies no batch while
paused: :func:`baton.cascade.apply.apply_batch` refuses one in its transaction), so its
table stays as of its position P while it is read. The provider goes on: writes continue at
the root and the provider's table is read as it is, in one snapshot per partition. A key the
provider changed after P has events after P in the provider's queue (which holds them for the
node, whose watermark is at most P); those keys are left out of the comparison and counted as
*in flight*: the queue sets them at the node once it resumes (events carry full row images,
so a key's last event decides its row whatever the node held). Every other key is compared as
of P exactly: the provider's row of such a key did not change between P and its read.

**Whose pause.** The pause is marked as this operation's (the node's local key
``compare``), so a compare or repair interrupted at any point (SIGKILL) leaves the node paused
and marked, and running it again continues; a node paused by someone else is refused, and so
is one resumed by someone during the operation (its position moved: run it again).

**Cheap first pass** (:func:`_suspects`, both sides PostgreSQL, a key of one integer column):
each database counts and fingerprints its rows per bucket of :data:`BUCKET` keys, both at once;
only the buckets that differ are read further, and a clean table is done there. A few suspect
buckets (up to :data:`DIRECT_KEYS` keys) are read here directly; more, or no first pass, and
Spark reads them.

**Exact.** Spark finds the candidate rows (:mod:`baton.spark.diff`: a full outer join on the
key of the two tables' encoded rows, hash partitioned by the key); the driver then decides each
candidate by value (:func:`same_row`), so two encodings of one value (an integer read as a
double from another backend) are not a difference. (The first pass can miss a difference only
by a 64-bit hash collision in one bucket.)

**Resync** (:func:`resync`) copies the table again instead, with the worker's Spark copy:
for a table that differs almost everywhere.

**Repair** writes the provider's rows for the missing and different keys and deletes the extra
ones in one transaction at the node, in the apply path (the guard triggers let it through), and
only if the node is still paused by this operation at P; then the node resumes and later events
apply on top.
"""

from __future__ import annotations

import json
import logging
import math
import struct
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from enum import StrEnum
from typing import Any, Protocol

from baton.cascade import copy_progress
from baton.cascade.codec import ExactNumber, decode, encode_row
from baton.cascade.db import NodeDB
from baton.cascade.db.base import bucket_range
from baton.cascade.model import PAUSE_MARK, Role
from baton.cascade.set_ops import CascadeSet
from baton.errors import CascadeError, CascadeInputError, NotFinished, Refused

log = logging.getLogger("baton.cascade")
MARK = PAUSE_MARK
#: Keys of each kind shown unless asked for more (``--keys``); JSON carries them all.
SHOWN_KEYS = 10


class Kind(StrEnum):
    MISSING = "missing"
    """At the provider, not at the node."""
    EXTRA = "extra"
    """At the node, not at the provider."""
    DIFFERENT = "different"
    """At both, with other values."""


@dataclass(frozen=True, slots=True)
class Candidate:
    """A row pair Spark found different by its encoding (None: no row on that side)."""

    node: str | None
    provider: str | None


#: How far a table's comparison has got: (tasks done, tasks in all).
Report = Callable[[int, int], None]


class Differ(Protocol):
    """Reads both tables and returns the candidates: (node location, provider location,
    table, the key's column positions, a progress callback) -> candidate pairs."""

    def __call__(
        self,
        node: str,
        provider: str,
        table: str,
        positions: Sequence[int],
        *,
        progress: Report | None = None,
        ranges: Sequence[tuple[int, int]] | None = None,
    ) -> Iterable[Candidate]: ...


#: Where progress goes besides the node's mark (the command line's progress bar): (node,
#: operation, table, done, total).
Sink = Callable[[str, str, str, int, int], None]
_SINKS: list[Sink] = []
#: Seconds between two writes of the progress into the node's mark.
MARK_EVERY = 1.0


def use_progress(sink: Sink | None) -> None:
    """Send every comparison's progress in this process to ``sink`` too (None: no more)."""
    _SINKS[:] = [] if sink is None else [sink]


class MarkProgress:
    """A table's progress, to the sinks and (every :data:`MARK_EVERY` seconds) into the node's
    mark, where ``cascade status`` shows it."""

    def __init__(self, c: CascadeSet, node: str, what: str, table: str) -> None:
        self.c, self.node, self.what, self.table = c, node, what, table
        self._last = 0.0

    def __call__(self, done: int, total: int) -> None:
        for sink in _SINKS:
            sink(self.node, self.what, self.table, done, total)
        now = time.monotonic()
        if now - self._last < MARK_EVERY and done < total:
            return
        self._last = now
        with self.c.db(self.node) as db, db.transaction() as cur:
            if db.get_local(MARK) is None:
                return  # the operation ended meanwhile
            body = {"by": self.what, "at": time.time(), "table": self.table, "done": done,
                    "total": total}  # fmt: skip
            db.set_local(cur, MARK, json.dumps(body))


#: The process's differ factory (:func:`use_differ`): the cascade does not import Spark (its
#: layer is below it), so the command line and the node's API, which do, give it one.
_FACTORY: list[Callable[[], Differ]] = []


def use_differ(factory: Callable[[], Differ]) -> None:
    """Compare and repair in this process with the differ ``factory`` builds (on first use)."""
    _FACTORY[:] = [factory]


def process_differ() -> Differ:
    """A differ that builds the process's own on first use (so bad input is refused before a
    Spark session starts)."""
    built: list[Differ] = []

    def differ(
        node: str,
        provider: str,
        table: str,
        positions: Sequence[int],
        *,
        progress: Report | None = None,
        ranges: Sequence[tuple[int, int]] | None = None,
    ) -> Iterable[Candidate]:
        if not built:
            if not _FACTORY:
                raise CascadeError(
                    "compare needs Spark, and this process has none: run it with the baton "
                    "command line or a node's API"
                )
            built.append(_FACTORY[0]())
        return built[0](node, provider, table, positions, progress=progress, ranges=ranges)

    return differ


@dataclass(frozen=True, slots=True)
class RowDiff:
    kind: Kind
    key: tuple[Any, ...]
    #: The node's and the provider's rows (None where there is none).
    node: tuple[Any, ...] | None
    provider: tuple[Any, ...] | None


@dataclass(frozen=True, slots=True)
class TableDiff:
    """One table compared at the node's position."""

    table: str
    columns: list[str]
    key_columns: list[str]
    diffs: list[RowDiff]
    #: Keys the provider changed after the position: left to the queue, not compared.
    in_flight: int
    seconds: float

    def of(self, kind: Kind) -> list[RowDiff]:
        return [d for d in self.diffs if d.kind is kind]

    @property
    def equal(self) -> bool:
        return not self.diffs

    def as_dict(self, keys: int | None = None) -> dict[str, Any]:
        """For JSON: counts, and the keys of each kind (the first ``keys``, or all)."""
        out: dict[str, Any] = {"equal": self.equal, "in_flight": self.in_flight,
                               "seconds": round(self.seconds, 3)}  # fmt: skip
        for kind in Kind:
            found = self.of(kind)
            out[kind.value] = len(found)
            shown = found if keys is None else found[:keys]
            out[f"{kind.value}_keys"] = [
                dict(zip(self.key_columns, map(_plain, d.key), strict=True)) for d in shown
            ]
        return out


@dataclass(frozen=True, slots=True)
class Compared:
    """A compare's result: the node, its provider and the tick they were compared at."""

    node: str
    provider: str
    position: int
    tables: dict[str, TableDiff] = field(default_factory=dict)

    @property
    def equal(self) -> bool:
        return all(t.equal for t in self.tables.values())


# -- values -------------------------------------------------------------------------------------


def _plain(value: Any) -> Any:
    """A value as JSON can show it."""
    if isinstance(value, bytes | memoryview):
        return bytes(value).hex()
    if isinstance(value, ExactNumber):
        return value.text
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


def _exact(value: Any) -> Decimal | None:
    try:
        if isinstance(value, ExactNumber):
            return Decimal(value.text)
        if isinstance(value, bool):
            return Decimal(int(value))
        if isinstance(value, int | float) and (
            not isinstance(value, float) or math.isfinite(value)
        ):
            return Decimal(value)  # exact: a double's binary value, an integer of any size
    except InvalidOperation:
        return None
    return None


def same_value(a: Any, b: Any) -> bool:
    """Whether two values read from two nodes are the same, by capture's rules: bit for bit
    for doubles (minus zero is not zero; every NaN is the same NaN), exact for numbers of any
    size whatever type read them (SQLite's 1 is PostgreSQL's 1.0 and true), bytes as bytes,
    text as text, NULL only as NULL."""
    if a is None or b is None:
        return a is None and b is None
    if (
        isinstance(a, float)
        and isinstance(b, float)
        and not isinstance(a, ExactNumber)
        and (not isinstance(b, ExactNumber))
    ):
        if math.isnan(a) and math.isnan(b):
            return True
        return struct.pack("<d", a) == struct.pack("<d", b)
    x, y = _exact(a), _exact(b)
    if x is not None and y is not None:
        if isinstance(a, float) and isinstance(b, float) and (a == 0.0 and b == 0.0):
            return math.copysign(1, a) == math.copysign(1, b)
        return x == y
    if isinstance(a, bytes | memoryview) and isinstance(b, bytes | memoryview):
        return bytes(a) == bytes(b)
    if isinstance(a, float) and isinstance(b, float):  # infinities, NaN
        return (math.isnan(a) and math.isnan(b)) or a == b
    return type(a) is type(b) and bool(a == b)


def same_row(a: Sequence[Any], b: Sequence[Any]) -> bool:
    return len(a) == len(b) and all(same_value(x, y) for x, y in zip(a, b, strict=True))


def _key(values: Sequence[Any], positions: Sequence[int]) -> tuple[Any, ...]:
    """A hashable key whose equality is :func:`same_value`'s for keys (integers, text)."""
    out = []
    for i in positions:
        v = values[i]
        if isinstance(v, bytes | memoryview):
            v = bytes(v)
        elif isinstance(v, float) and not isinstance(v, ExactNumber) and v.is_integer():
            v = int(v)  # an integer key read as a double elsewhere is the same key
        elif isinstance(v, bool):
            v = int(v)
        out.append(v)
    return tuple(out)


def _order(key: tuple[Any, ...]) -> tuple[tuple[str, Any], ...]:
    """Keys in their natural order (numbers by value, text by text), kinds apart."""
    return tuple(
        (type(v).__name__, 0 if isinstance(v, float) and math.isnan(v) else v) for v in key
    )


def decide(
    candidates: Iterable[Candidate],
    positions: Sequence[int],
    in_flight: set[tuple[Any, ...]],
    exact: bool = False,
) -> list[RowDiff]:
    """The differences among Spark's candidates: keys in flight left out, each pair decided by
    value; a key on both sides once (a missing and an extra row of one key, as two encodings
    of it may join apart) is one pair."""
    node: dict[tuple[Any, ...], tuple[Any, ...]] = {}
    provider: dict[tuple[Any, ...], tuple[Any, ...]] = {}
    for c in candidates:
        if c.node is not None:
            row = tuple(decode(c.node, exact))
            node[_key(row, positions)] = row
        if c.provider is not None:
            row = tuple(decode(c.provider, exact))
            provider[_key(row, positions)] = row
    out = []
    for key in sorted(node.keys() | provider.keys(), key=_order):
        if key in in_flight:
            continue
        n, p = node.get(key), provider.get(key)
        if n is None:
            out.append(RowDiff(Kind.MISSING, key, None, p))
        elif p is None:
            out.append(RowDiff(Kind.EXTRA, key, n, None))
        elif not same_row(n, p):
            out.append(RowDiff(Kind.DIFFERENT, key, n, p))
    return out


# -- the pause ------------------------------------------------------------------------------------


def _check_node(c: CascadeSet, node: str, tables: Sequence[str]) -> tuple[str, list[str]]:
    """``node``'s provider and the tables to compare (every one in state ok when none given);
    one line for what cannot be compared."""
    st = c.state(node)
    if st.role is Role.ROOT or st.provider is None:
        raise CascadeInputError(
            f"{node} is the root of set {c.set_name}: it has no provider to compare with; "
            "compare a branch or a leaf"
        )
    with c.db(node) as db:
        mine = db.tables()
    with c.db(st.provider) as db:
        theirs = db.tables()
    for t in tables:
        if t not in mine:
            raise CascadeInputError(
                f"{node} does not replicate table {t!r} (it has {sorted(mine) or 'none'}; see "
                f"'baton cascade tables --node {node}')"
            )
        if mine[t] != "ok":
            raise Refused(f"{t} at {node} is {mine[t]}, not ok: compare it once it is copied")
        if t not in theirs:
            raise Refused(f"{st.provider}, {node}'s provider, does not replicate {t}")
    chosen = list(tables) or sorted(t for t, s in mine.items() if s == "ok" and t in theirs)
    if not chosen:
        raise Refused(f"{node} has no table in state ok to compare")
    return st.provider, chosen


@contextmanager
def paused(c: CascadeSet, node: str, what: str) -> Iterator[int]:
    """Pause ``node`` as ``what`` (compare, repair) and yield its position; resume it after.
    Continues a pause of this kind left by an interrupted run; refuses one of someone else."""
    with c.db(node) as db, db.transaction() as cur:
        st = db.state()
        mark = db.get_local(MARK)
        if st.paused and mark is None:
            raise Refused(
                f"{node} is paused by someone else (baton cascade pause): {what} pauses it "
                f"itself; resume it first ('baton cascade resume {node}') or wait"
            )
        db.set_local(cur, "paused", "1")
        db.set_local(cur, MARK, json.dumps({"by": what, "at": time.time()}))
        position = st.position
    try:
        yield position
    except BaseException:
        # An error or a Ctrl-C: the node goes back to applying rather than waiting, paused, for
        # an operator to notice. Only a killed process leaves the mark (the next run continues).
        _resume_after_failure(c, node, position)
        raise
    with c.db(node) as db, db.transaction() as cur:
        _still(db, node, position)
        db.set_local(cur, MARK, None)
        db.set_local(cur, "paused", "0")


def _resume_after_failure(c: CascadeSet, node: str, position: int) -> None:
    """Undo :func:`paused`'s pause after a failed run, if it is still this run's; best effort
    (an unreachable node keeps the mark, and the failure being raised says more)."""
    try:
        with c.db(node) as db, db.transaction() as cur:
            st = db.state()
            if st.paused and db.get_local(MARK) is not None and st.position == position:
                db.set_local(cur, MARK, None)
                db.set_local(cur, "paused", "0")
    except (CascadeError, OSError) as e:
        log.warning("%s stays paused after the failed run (%s): run it again or resume it", node, e)


def paused_by(mark: str | None) -> str | None:
    """Which operation a node's :data:`MARK` says paused it (None: no mark)."""
    if mark is None:
        return None
    try:
        body = json.loads(mark)
        said = str(body["by"])
        if "table" in body:
            said += f": {body['table']}, {body['done']}/{body['total']} tasks"
        return said
    except (ValueError, KeyError, TypeError):
        return "compare"


def _still(db: NodeDB, node: str, position: int) -> None:
    """Refuse when ``node`` is no longer paused by this operation at ``position``."""
    st = db.state()
    if not st.paused or db.get_local(MARK) is None or st.position != position:
        raise Refused(
            f"{node} was resumed while it was compared (its position moved from tick "
            f"{position} to {st.position}): nothing was changed; run it again"
        )


def _in_flight(c: CascadeSet, provider: str, table: str, position: int,
               key_columns: Sequence[str]) -> set[tuple[Any, ...]]:  # fmt: skip
    """The keys of ``table`` the provider changed after ``position`` (read after the rows, so
    every change the rows' snapshots saw is among them)."""
    out = set()
    with c.db(provider) as db:
        for text in db.keys_after(table, position):
            key = decode(text or "null")
            if isinstance(key, dict) and all(k in key for k in key_columns):
                values = [key[k] for k in key_columns]
                out.add(_key(values, range(len(values))))
    return out


#: Keys per bucket of the first pass (:func:`_suspects`).
BUCKET = 100
#: Past this many suspect buckets, the rows are all read (a range list that long costs more
#: than it saves).
MAX_SUSPECTS = 20_000


#: Up to this many keys in the suspect buckets, their rows are read here rather than by a
#: Spark job (which costs more to start than reading them takes).
DIRECT_KEYS = 100_000


def _direct(
    c: CascadeSet, node: str, provider: str, table: str, ranges: Sequence[tuple[int, int]]
) -> list[Candidate]:
    """Every row of the suspect ``ranges`` on both sides, read here (both databases at once),
    each a candidate: :func:`decide` pairs them by key and judges them by value."""

    def rows(name: str) -> list[str]:
        with c.db(name) as db:
            return [encode_row(r) for span in ranges for r in db.read_rows(table, span)]

    with ThreadPoolExecutor(2, thread_name_prefix="baton-direct") as pool:
        mine, theirs = pool.map(rows, (node, provider))
    return [Candidate(r, None) for r in mine] + [Candidate(None, r) for r in theirs]


def _suspects(c: CascadeSet, node: str, provider: str, table: str) -> list[tuple[int, int]] | None:
    """The cheap first pass: the key ranges (buckets of :data:`BUCKET` keys) whose row count
    or fingerprint differ between the node and its provider, computed in each database (as
    reladiff and data-diff do); [] when none differs; None when the backends cannot (then
    every row is read). Both sides must be the same backend (a hash is the type's). A bucket
    whose fingerprints agree holds the same rows but for a 64-bit hash collision, which is the
    only way this pass can miss a difference."""
    kinds = {c.location(n).split(":", 1)[0] for n in (node, provider)}
    if len(kinds) != 1:
        return None

    def sums(name: str) -> dict[int, tuple[int, int]] | None:
        with c.db(name) as db:
            return db.bucket_sums(table, BUCKET)

    # Both databases scan at once (each on its own connection).
    with ThreadPoolExecutor(2, thread_name_prefix="baton-sums") as pool:
        mine, theirs = pool.map(sums, (node, provider))
    if mine is None or theirs is None:
        return None
    buckets = sorted(b for b in mine.keys() | theirs.keys() if mine.get(b) != theirs.get(b))
    if len(buckets) > MAX_SUSPECTS:
        return None
    return [bucket_range(b, BUCKET) for b in buckets]


def compare_tables(
    c: CascadeSet, node: str, provider: str, tables: Sequence[str], position: int,
    *, differ: Differ, what: str = "compare",
    within: dict[str, list[tuple[int, int]] | None] | None = None,
) -> dict[str, TableDiff]:  # fmt: skip
    """Each table of ``tables`` compared while ``node`` is paused at ``position``. The key
    ranges the first pass found suspect are put in ``within`` (a table -> its ranges, None
    when there was no first pass); given a table's ranges there, only those are compared."""
    out = {}
    for table in tables:
        started = time.monotonic()
        with c.db(node) as db:
            cols, pk = db.columns(table)
            exact = db.exact_numbers(table)
        positions = [cols.index(k) for k in pk] or list(range(len(cols)))
        key_cols = [cols[i] for i in positions]
        progress = MarkProgress(c, node, what, table)
        if within is not None and within.get(table) is not None:
            suspect = within[table]
        else:
            suspect = _suspects(c, node, provider, table)
            if within is not None:
                within[table] = suspect
        if suspect == []:
            found: list[Candidate] = []  # every bucket's count and fingerprint agree
        elif suspect is not None and len(suspect) * BUCKET <= DIRECT_KEYS:
            found = _direct(c, node, provider, table, suspect)
        else:
            where = (c.location(node), c.location(provider))
            found = list(differ(*where, table, positions, progress=progress, ranges=suspect))
        flight = _in_flight(c, provider, table, position, key_cols)
        diffs = decide(found, positions, flight, exact)
        out[table] = TableDiff(
            table, cols, key_cols, diffs, len(flight), time.monotonic() - started
        )
    with c.db(node) as db:
        _still(db, node, position)
    return out


def compare(c: CascadeSet, node: str, tables: Sequence[str], differ: Differ) -> Compared:
    """``compare NODE [TABLE...]``: see the module docstring."""
    provider, chosen = _check_node(c, node, tables)
    with paused(c, node, "compare") as position:
        found = compare_tables(c, node, provider, chosen, position, differ=differ)
    return Compared(node, provider, position, found)


@dataclass(frozen=True, slots=True)
class Repaired:
    node: str
    table: str
    position: int
    #: Rows written (missing and different) and deleted (extra).
    written: int
    deleted: int
    #: The compare after the repair is clean.
    equal_after: bool


def repair(c: CascadeSet, node: str, table: str, differ: Differ) -> Repaired:
    """``repair NODE TABLE``: compare at the node's position, write the provider's rows for
    the missing and different keys and delete the extra ones in one transaction (fenced by the
    pause at that position), compare again, resume."""
    provider, _ = _check_node(c, node, [table])
    with paused(c, node, "repair") as position:
        # The first pass's suspect ranges: the check after the repair reads only those. The
        # node is paused at one position throughout and the repair writes only keys in them,
        # so every other range is as the first pass found it (equal, or in flight from the
        # provider, which the queue brings either way).
        within: dict[str, list[tuple[int, int]] | None] = {}
        diff = compare_tables(
            c, node, provider, [table], position, differ=differ, what="repair", within=within
        )[table]
        positions = [diff.columns.index(k) for k in diff.key_columns]
        rows = [d.provider for d in diff.diffs if d.provider is not None]
        keys = [[d.node[i] for i in positions] for d in diff.of(Kind.EXTRA) if d.node]
        with c.db(node) as db, db.transaction() as cur:
            _still(db, node, position)
            if keys:
                db.delete_keys(cur, table, diff.key_columns, keys)
            if rows:
                db.upsert(cur, table, diff.columns, rows)
        after = compare_tables(
            c, node, provider, [table], position, differ=differ, what="repair", within=within
        )[table]
    return Repaired(node, table, position, len(rows), len(keys), after.equal)


@dataclass(frozen=True, slots=True)
class Resynced:
    node: str
    table: str
    #: The table's state when the command returned (ok once the copy is done and caught up).
    state: str
    #: It was being copied already (a resync run again, or a copy under way).
    already: bool


#: How often a waiting resync reads the table's state (seconds).
RESYNC_POLL = 0.2


def resync(c: CascadeSet, node: str, table: str, timeout: float) -> Resynced:
    """``resync NODE TABLE``: copy ``table`` to ``node`` again from its provider with the
    worker's Spark copy (:func:`baton.cascade.node_ops.copy_table`): the table becomes
    ``copying`` and NODE's worker copies it in one transaction (its old rows replaced, never
    an empty table in between), then catches up from the copy's tick. Waits up to ``timeout``
    seconds for ``ok`` (0: not at all); :class:`NotFinished` when it is not there yet (the
    copy goes on: run it again to wait). Resumable: run again, it waits for the same copy."""
    st = c.state(node)
    if st.role is Role.ROOT or st.provider is None:
        raise CascadeInputError(
            f"{node} is the root of set {c.set_name}: its tables are the source; resync a "
            "branch or a leaf"
        )
    if st.merge_leaf:
        raise Refused(
            f"{node} is a merge-leaf: its {table} holds other partitions' rows too; resync "
            "the partition set's nodes instead"
        )
    with c.db(node) as db:
        state = db.tables().get(table)
        if state is None:
            raise CascadeInputError(
                f"{node} does not replicate table {table!r} (it has "
                f"{sorted(db.tables()) or 'none'}; see 'baton cascade tables --node {node}')"
            )
        already = state == "copying"
        if not already:
            with db.transaction() as cur:
                db.set_table(cur, table, "copying", db.table_tick(table))
    if timeout == 0:
        return Resynced(node, table, "copying", already)
    deadline = time.monotonic() + timeout
    while True:
        with c.db(node) as db:
            state = db.tables().get(table, "absent")
            copied = copy_progress.of(db, table)
        if copied is not None:
            for sink in _SINKS:  # the worker's copy, as its progress mark says it
                sink(node, "copy", table, *copied)
        if state == "ok":
            return Resynced(node, table, state, already)
        if time.monotonic() >= deadline:
            raise NotFinished(
                f"{table} at {node} is {state} after {timeout:g} s: {node}'s worker copies it "
                "(is its service running? see 'baton cascade status'); run resync again to wait"
            )
        time.sleep(RESYNC_POLL)


__all__ = [
    "MARK",
    "SHOWN_KEYS",
    "Candidate",
    "Compared",
    "Differ",
    "Kind",
    "MarkProgress",
    "Report",
    "Resynced",
    "RowDiff",
    "TableDiff",
    "compare",
    "decide",
    "paused_by",
    "process_differ",
    "repair",
    "resync",
    "same_row",
    "same_value",
    "use_differ",
    "use_progress",
]
