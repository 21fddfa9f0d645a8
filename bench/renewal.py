"""Benchmark 4: the cost of one renewal cycle of a holder with N leases.

One holder acquires N leases (ttl 60 s, in concurrent batches; 900 s on etcd), then
``store.renew(holder, leases)`` is timed: one untimed warm-up call (its time kept: on etcd it is
the call that moves the leases into a bundle), then :data:`REPEATS` timed calls, the median
reported. Round trips are verified where the server can tell:

* Redis: ``INFO commandstats`` before and after each timed call (from a separate client). The
  commands a client sent are those of the delta that baton's Lua scripts never call themselves
  (the scripts' own ``redis.call`` commands are counted too, as commands run by the script);
  ``EVALSHA``'s ``usec`` is the server-side time.
* PostgreSQL: ``pg_stat_statements`` is not loaded, so the server is told to log every statement
  with its duration (``log_min_duration_statement = 0``) during the timed calls only, and the
  ``execute`` lines of its log are counted; their duration is the server-side time.
* SQLite: embedded, no round trip; ``renew`` is one transaction by construction (one function
  run on the store's connection thread).
* etcd: cannot count requests per client; the store's own counts are read instead (its
  renewal's requests after the warm-up: one per bundle, see :mod:`baton.store.etcd_renewal`).
"""

from __future__ import annotations

import asyncio
import inspect
import re
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
import redis

import baton.store.redis as redis_store
from baton.store import Lease, Store, open_store
from bench.common import BenchError, backend_server, loadavg, temp_dir

TTL = 60.0
HOLDER = "renewer"
REPEATS = 5
#: Concurrent acquires per batch: bounds the calls in flight (and pooled connections) while
#: keeping the setup of 100k leases to seconds.
BATCH = 64
FULL_SIZES = (1, 1_000, 10_000, 100_000)
QUICK_SIZES = (1, 1_000, 10_000)
#: etcd's set-up of 100k leases takes a minute or two (acquires commit 16 at a time), and its
#: warm-up renewal (moving them into a bundle) 15-20 s: with ttl 60 s the first leases would
#: lapse before it. The ttl changes nothing in what a renewal costs.
ETCD_TTL = 900.0


@dataclass
class RenewRow:
    backend: str
    n: int
    setup: float = 0.0
    """Seconds to acquire the N leases."""
    times: list[float] = field(default_factory=list)
    """Wall time of each timed ``renew`` call."""
    lost: int = 0
    """Leases a timed renewal reported lost (should be 0)."""
    warmup_lost: int = 0
    warmup: float = 0.0
    """Seconds of the untimed warm-up renewal (on etcd: moving the leases into a bundle)."""
    round_trips: list[int] = field(default_factory=list)
    """Client commands (Redis) or statements executed (PostgreSQL) per timed call."""
    commands: str = ""
    """What those round trips were (``evalsha``...)."""
    server: list[float] = field(default_factory=list)
    """Server-side seconds per timed call (Redis script time, PostgreSQL execute time)."""
    load: tuple[float, float] = (0.0, 0.0)

    @property
    def median(self) -> float:
        return statistics.median(self.times) if self.times else float("nan")

    @property
    def server_median(self) -> float:
        return statistics.median(self.server) if self.server else float("nan")


# -- round-trip probes ----------------------------------------------------------------------


class Probe:
    """Counts what the server did during one call (nothing for SQLite)."""

    def before(self) -> None:
        pass

    def after(self, row: RenewRow) -> None:
        pass

    def close(self) -> None:
        pass


def _script_commands() -> set[str]:
    """Every command baton's Redis Lua scripts call themselves (lower case)."""
    source = inspect.getsource(redis_store)
    return {m.lower() for m in re.findall(r"redis\.p?call\(\s*'([A-Za-z]+)'", source)}


class EtcdProbe(Probe):
    """etcd cannot count requests per client: the store's gateway counts the requests it sends
    (a renewal of leases in one bundle is one transaction; leases renewed each on its own key
    are one transaction per :data:`~baton.store.etcd_renewal.RENEW_CHUNK`)."""

    def __init__(self, store: Store) -> None:
        from baton.store.etcd import EtcdStore

        assert isinstance(store, EtcdStore)
        self._store = store
        self._before = 0

    def before(self) -> None:
        self._before = self._store.requests

    def after(self, row: RenewRow) -> None:
        sent = self._store.requests - self._before
        row.round_trips.append(sent)
        row.commands = "1 txn" if sent == 1 else f"{sent} txns, at most 8 in flight"


class RedisProbe(Probe):
    def __init__(self, url: str) -> None:
        self._client = redis.Redis.from_url(url.split("?", 1)[0])
        self._inner = _script_commands()
        self._before: dict[str, tuple[int, int]] = {}

    def _stats(self) -> dict[str, tuple[int, int]]:
        raw: dict[str, Any] = self._client.info("commandstats")
        return {
            name.removeprefix("cmdstat_"): (int(v["calls"]), int(v["usec"]))
            for name, v in raw.items()
        }

    def before(self) -> None:
        self._before = self._stats()

    def after(self, row: RenewRow) -> None:
        delta: dict[str, tuple[int, int]] = {}
        for name, (calls, usec) in self._stats().items():
            c0, u0 = self._before.get(name, (0, 0))
            if calls > c0 and name != "info":
                delta[name] = (calls - c0, usec - u0)
        sent = {k: v for k, v in delta.items() if k not in self._inner}
        row.round_trips.append(sum(c for c, _ in sent.values()))
        row.commands = ", ".join(f"{c} {k.upper()}" for k, (c, _) in sorted(sent.items()))
        row.server.append(sum(u for _, u in sent.values()) / 1e6)

    def close(self) -> None:
        self._client.close()


_DURATION = re.compile(r"LOG:\s+duration: ([0-9.]+) ms\s+(execute|statement)\b")


class PostgresProbe(Probe):
    def __init__(self, url: str, log: Path) -> None:
        self._url = url.split("?", 1)[0]
        self._log = log
        self._offset = 0
        self._set("0", "0")

    def _set(self, min_duration: str, param_length: str) -> None:
        with psycopg.connect(self._url, autocommit=True) as conn:
            conn.execute(f"ALTER SYSTEM SET log_min_duration_statement = {min_duration}")
            conn.execute(f"ALTER SYSTEM SET log_parameter_max_length = {param_length}")
            conn.execute("SELECT pg_reload_conf()")
        time.sleep(0.2)  # backends apply the new settings before their next statement

    def before(self) -> None:
        self._offset = self._log.stat().st_size

    def after(self, row: RenewRow) -> None:
        with self._log.open("rb") as f:
            f.seek(self._offset)
            text = f.read().decode(errors="replace")
        found = _DURATION.findall(text)
        row.round_trips.append(len(found))
        row.commands = "1 statement" if len(found) == 1 else f"{len(found)} statements"
        row.server.append(sum(float(ms) for ms, _kind in found) / 1000)

    def close(self) -> None:
        self._set("-1", "-1")


# -- the benchmark --------------------------------------------------------------------------


async def _acquire_all(store: Store, n: int, ttl: float) -> list[Lease]:
    leases: list[Lease] = []
    for start in range(0, n, BATCH):
        names = [f"lease-{i:06d}" for i in range(start, min(n, start + BATCH))]
        got = await asyncio.gather(*(store.acquire(name, HOLDER, ttl) for name in names))
        for name, lease in zip(names, got, strict=True):
            if lease is None:
                raise BenchError(f"could not acquire {name} in a fresh namespace")
            leases.append(lease)
    return leases


async def _measure(
    url: str, row: RenewRow, probe: Callable[[Store], Probe], progress: Callable[[str], None]
) -> None:
    store = open_store(url)
    await store.connect()
    try:
        started = time.monotonic()
        leases = await _acquire_all(store, row.n, ETCD_TTL if row.backend == "etcd" else TTL)
        row.setup = time.monotonic() - started
        t0 = time.perf_counter()
        warm = await store.renew(HOLDER, leases)
        row.warmup = time.perf_counter() - t0
        row.warmup_lost = sum(v is None for v in warm.values())
        p = probe(store)
        try:
            for _ in range(REPEATS):
                p.before()
                t0 = time.perf_counter()
                renewed = await store.renew(HOLDER, leases)
                row.times.append(time.perf_counter() - t0)
                p.after(row)
                row.lost += sum(v is None for v in renewed.values())
        finally:
            p.close()
    finally:
        await store.close()
    progress(
        f"  {row.backend} N={row.n}: setup {row.setup:.1f} s, warm-up {row.warmup:.2f} s, "
        f"renew median {row.median * 1000:.1f} ms, {row.commands or 'one transaction'}"
    )


def renewal(backend: str, sizes: Sequence[int], progress: Callable[[str], None]) -> list[RenewRow]:
    """Benchmark 4 on one backend: one server (SQLite: one file), a fresh namespace per N."""
    rows: list[RenewRow] = []
    with temp_dir(f"renewal-{backend}") as tmp, backend_server(backend, tmp, "renew") as server:
        for n in sizes:
            url = server.url.replace("namespace=renew", f"namespace=renew_{n}")
            row = RenewRow(backend, n, load=(loadavg(), 0.0))
            rows.append(row)

            def probe(store: Store, url: str = url) -> Probe:
                if backend == "redis":
                    return RedisProbe(url)
                if backend == "etcd":
                    return EtcdProbe(store)
                if server.server_log is not None:
                    return PostgresProbe(url, server.server_log)
                return Probe()

            asyncio.run(_measure(url, row, probe, progress))
            row.load = (row.load[0], loadavg())
    return rows
