"""Coordination stores. ``open_store(url)`` picks the backend by URL scheme.

=====================================  ==================================================
``sqlite:///abs/path/baton.db``        the embedded default: one file, many processes on
``sqlite:relative/baton.db``           one host (see :func:`sqlite_path` for every
                                       spelling; ``sqlite:////abs`` is the same file as
                                       ``sqlite:///abs``)
``redis://[:password@]host:port/db``   Redis 6.2+ (Lua scripts, ``TIME``, pub/sub)
``redis+masterfile:///abs/path``       Redis at the master a master file names (seed 002,
                                       :mod:`baton.store.master_file`; ``?db=N&password=``)
``postgresql://user@host:port/db``     PostgreSQL 13+ (``clock_timestamp()``,
                                       LISTEN/NOTIFY)
``etcd://host:port[,host:port]/prefix`` etcd 3.4+ through its JSON gateway (``etcds://``
                                       for TLS, ``user:password@`` before the hosts,
                                       ``?cacert=/path/ca.pem``)
=====================================  ==================================================

Every URL accepts ``?namespace=NAME`` (default ``baton``): independent clusters can share one
server. Drivers are imported only when their scheme is used, with an install hint if missing.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from pathlib import Path
from urllib.parse import unquote_plus

from baton.backoff import Backoff
from baton.errors import (
    ConfigError,
    NoMaster,
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
)

_NAMESPACE = re.compile(r"^[a-z][a-z0-9_]{0,39}$")
SCHEMES = (
    "sqlite", "redis", "rediss", "redis+masterfile", "postgresql", "postgres", "etcd", "etcds",
)  # fmt: skip


def _split_options(url: str) -> tuple[str, str]:
    """Remove baton's own ``namespace`` query option from ``url``; return (url, namespace).

    The rest of the URL is kept as written, character for character: rebuilding it with
    ``urlunsplit`` turned ``sqlite:////abs`` into ``sqlite://abs`` (a relative path)."""
    base, _, query = url.partition("?")
    namespace = "baton"
    kept: list[str] = []
    for item in query.split("&") if query else []:
        key, _, value = item.partition("=")
        if unquote_plus(key) == "namespace":
            namespace = unquote_plus(value)
        elif item:
            kept.append(item)
    if not _NAMESPACE.match(namespace):
        raise ConfigError(
            f"bad namespace {namespace!r} in store URL: use 1-40 lower-case letters, digits or "
            "'_', starting with a letter"
        )
    return (f"{base}?{'&'.join(kept)}" if kept else base), namespace


def open_store(url: str) -> Store:
    """Return an (unconnected) store for ``url``. Use ``async with open_store(url) as store``
    or call ``await store.connect()``. A bad URL raises :class:`ConfigError` at once."""
    if not isinstance(url, str) or ("://" not in url and not url.startswith("sqlite:")):
        raise ConfigError(
            f"bad store URL {redact_url(str(url))!r}: expected sqlite:///path/file.db, "
            "redis://host:port/db, postgresql://user@host:port/dbname or "
            "etcd://host:port/prefix"
        )
    scheme = url.split(":", 1)[0].lower()
    if scheme not in SCHEMES:
        raise ConfigError(
            f"unsupported store URL scheme {scheme!r} in {redact_url(url)!r}: use sqlite, redis, "
            "postgresql or etcd"
        )
    base_url, namespace = _split_options(url)
    if scheme == "sqlite":
        from baton.store.sqlite import SQLiteStore

        return SQLiteStore(sqlite_path(base_url), namespace=namespace)
    if scheme == "redis+masterfile":
        try:
            from baton.store.master_file import MasterFileRedisStore, parse_store_url
        except ImportError as exc:  # pragma: no cover - depends on the install
            raise ConfigError("the Redis store needs redis-py: pip install 'baton[redis]'") from exc
        path, db, password = parse_store_url(base_url)
        return MasterFileRedisStore(path, db=db, password=password, namespace=namespace)
    if scheme in ("redis", "rediss"):
        try:
            from baton.store.redis import RedisStore
        except ImportError as exc:  # pragma: no cover - depends on the install
            raise ConfigError("the Redis store needs redis-py: pip install 'baton[redis]'") from exc
        return RedisStore(base_url, namespace=namespace)
    if scheme in ("etcd", "etcds"):
        # httpx is a dependency of baton itself: no extra to install.
        from baton.store.etcd import EtcdStore

        return EtcdStore(base_url, namespace=namespace)
    try:
        from baton.store.postgres import PostgresStore
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise ConfigError(
            "the PostgreSQL store needs psycopg 3: pip install 'baton[postgres]'"
        ) from exc
    return PostgresStore(base_url, namespace=namespace)


def sqlite_path(url: str) -> str:
    """The file an ``sqlite:`` URL names: the one parser of SQLite locations, used by store URLs,
    cascade node locations and node config files alike, so a spelling means the same file
    everywhere.

    ==========================================  =============================================
    ``sqlite:///abs/f.db``                      ``/abs/f.db`` (absolute)
    ``sqlite:////abs/f.db`` (SQLAlchemy)        ``/abs/f.db``, the same file
    ``sqlite:/abs/f.db``                        ``/abs/f.db``
    ``sqlite:rel/f.db``, ``sqlite://rel/f.db``  ``rel/f.db``, relative to the working directory
    ==========================================  =============================================

    Raises :class:`ConfigError` for another scheme, no file, a directory, or query options (a
    store's ``?namespace=`` is taken off before this is called)."""
    scheme, colon, rest = url.partition(":")
    if not colon or scheme.lower() != "sqlite":
        raise ConfigError(
            f"bad SQLite URL {redact_url(url)!r}: expected sqlite:///abs/path/file.db or "
            "sqlite:relative/path/file.db"
        )
    rest, question, query = rest.partition("?")
    if question:
        raise ConfigError(
            f"bad SQLite URL {url!r}: unknown option {query!r}; an SQLite URL takes no options "
            "(a store URL only ?namespace=NAME)"
        )
    # "//" opens an (empty) authority: what follows is the path. Any run of slashes before an
    # absolute path is one slash, so sqlite:////abs (SQLAlchemy) and sqlite:///abs agree;
    # without the collapse "//abs" would also be a different string for the same file.
    path = rest.removeprefix("//")
    if path.startswith("/"):
        path = "/" + path.lstrip("/")
    if not path or path == "/" or path.endswith("/"):
        raise ConfigError(
            f"bad SQLite URL {url!r}: give a file, for example sqlite:///var/lib/baton/baton.db"
        )
    return path


#: Seconds a starting process waits out a store that does not answer yet: a switch under way
#: behind a master file, a server that is paused, restarting or cut off by the network. A
#: process restarted in the middle of a store outage then comes up when the store does (the
#: fault campaign lost agents that exited after a few seconds instead).
START_WAIT = 120.0


async def connect_waiting(
    store: Store, *, say: Callable[[Exception], None], bound: float = START_WAIT
) -> None:
    """Connect ``store``, waiting out what ends on its own, for up to ``bound`` seconds: a
    store that does not answer in time (a paused or cut-off server; an SQLite file that stays
    locked while the nodes of a new cluster all create its schema); a master file that is
    empty (a store failover switch under way, or a failover client that has not written it
    yet), or that names a master that does not answer (the switch has not reached this host's
    file yet). A store that refuses outright, not behind a master file, is reported at once
    (most often a wrong address). ``say(error)`` once per cause, not once per try; past the
    bound, the error is raised."""
    # Behind a master file an unreachable master is what a switch looks like from here until
    # the file changes; any other store that refuses at start is reported at once.
    waits: tuple[type[StoreError], ...] = (
        StoreTimeout,
        StoreUnavailable if store.follows_master_file else NoMaster,
    )
    loop = asyncio.get_running_loop()
    started = loop.time()
    backoff = Backoff(0.1, 1.0)
    said: type[Exception] | None = None
    while True:
        try:
            await store.connect()
            return
        except waits as exc:
            if loop.time() + backoff.current > started + bound:
                raise
            if type(exc) is not said:
                say(exc)
                said = type(exc)
            await backoff.sleep()


def sqlite_url(path: str) -> str:
    """The canonical URL of the SQLite file ``path``, made absolute (``sqlite:///abs/f.db``):
    for a location that other processes, started in other directories, must find."""
    return f"sqlite://{Path(path).absolute()}"


__all__ = [
    "Capabilities",
    "Change",
    "ChangeKind",
    "Condition",
    "Delete",
    "Lapse",
    "Lease",
    "LeaseHeld",
    "Op",
    "Position",
    "Put",
    "Record",
    "Store",
    "TxnResult",
    "VersionIs",
    "connect_waiting",
    "open_store",
    "sqlite_path",
    "sqlite_url",
]
