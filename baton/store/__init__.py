"""Coordination stores. ``open_store(url)`` picks the backend by URL scheme.

=====================================  ==================================================
``sqlite:///abs/path/baton.db``        the embedded default: one file, many processes on
``sqlite:relative/baton.db``           one host
``redis://[:password@]host:port/db``   Redis 6.2+ (Lua scripts, ``TIME``, pub/sub)
``postgresql://user@host:port/db``     PostgreSQL 13+ (``clock_timestamp()``,
                                       LISTEN/NOTIFY)
=====================================  ==================================================

Every URL accepts ``?namespace=NAME`` (default ``baton``): independent clusters can share one
server. Drivers are imported only when their scheme is used, with an install hint if missing.
"""

from __future__ import annotations

import re
from urllib.parse import parse_qsl, urlsplit, urlunsplit

from baton.errors import ConfigError, redact_url
from baton.store.base import (
    Capabilities,
    Change,
    ChangeKind,
    Condition,
    Delete,
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
SCHEMES = ("sqlite", "redis", "rediss", "postgresql", "postgres")


def _split_options(url: str) -> tuple[str, str]:
    """Remove baton's own ``namespace`` query option from ``url``; return (url, namespace)."""
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    namespace = "baton"
    rest: list[tuple[str, str]] = []
    for key, value in query:
        if key == "namespace":
            namespace = value
        else:
            rest.append((key, value))
    if not _NAMESPACE.match(namespace):
        raise ConfigError(
            f"bad namespace {namespace!r} in store URL: use 1-40 lower-case letters, digits or "
            "'_', starting with a letter"
        )
    query_text = "&".join(f"{k}={v}" for k, v in rest)
    return urlunsplit(parts._replace(query=query_text)), namespace


def open_store(url: str) -> Store:
    """Return an (unconnected) store for ``url``. Use ``async with open_store(url) as store``
    or call ``await store.connect()``. A bad URL raises :class:`ConfigError` at once."""
    if not isinstance(url, str) or ("://" not in url and not url.startswith("sqlite:")):
        raise ConfigError(
            f"bad store URL {redact_url(str(url))!r}: expected sqlite:///path/file.db, "
            "redis://host:port/db or postgresql://user@host:port/dbname"
        )
    scheme = url.split(":", 1)[0].lower()
    if scheme not in SCHEMES:
        raise ConfigError(
            f"unsupported store URL scheme {scheme!r} in {redact_url(url)!r}: use sqlite, redis "
            "or postgresql"
        )
    base_url, namespace = _split_options(url)
    if scheme == "sqlite":
        from baton.store.sqlite import SQLiteStore

        return SQLiteStore(sqlite_path(base_url), namespace=namespace)
    if scheme in ("redis", "rediss"):
        try:
            from baton.store.redis import RedisStore
        except ImportError as exc:  # pragma: no cover - depends on the install
            raise ConfigError("the Redis store needs redis-py: pip install 'baton[redis]'") from exc
        return RedisStore(base_url, namespace=namespace)
    try:
        from baton.store.postgres import PostgresStore
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise ConfigError(
            "the PostgreSQL store needs psycopg 3: pip install 'baton[postgres]'"
        ) from exc
    return PostgresStore(base_url, namespace=namespace)


def sqlite_path(url: str) -> str:
    """The file path of an ``sqlite:`` URL (``sqlite:///abs`` or ``sqlite:relative``)."""
    path = url.split("?", 1)[0]
    path = path[len("sqlite://") :] if path.startswith("sqlite://") else path[len("sqlite:") :]
    if path.startswith("//"):
        path = path[1:]
    if not path or path == "/":
        raise ConfigError(
            f"bad SQLite URL {url!r}: give a file, for example sqlite:///var/lib/baton/baton.db"
        )
    return path


__all__ = [
    "Capabilities",
    "Change",
    "ChangeKind",
    "Condition",
    "Delete",
    "Lease",
    "LeaseHeld",
    "Op",
    "Position",
    "Put",
    "Record",
    "Store",
    "TxnResult",
    "VersionIs",
    "open_store",
]
