"""The Redis master file of seed 002, and the clients that follow it.

A configuration client (``baton redis-failover client``, :mod:`baton.failover`) keeps the
address of the current Redis master in a file on its host: ``host:port`` and a newline, or
nothing while a switch is under way. Workers read the file without asking any process: before
every command they compare the file's ``stat`` (modification time in nanoseconds, inode and
size) with what they saw last, re-read it when it changed, rebuild their connection pool when
the address changed, and refuse the command with :class:`~baton.errors.NoMaster` while the file
is empty. A ``stat`` costs about a microsecond, far below a Redis round trip.

This module lives in the store layer because baton's own Redis store follows a master file
when its URL names one::

    redis+masterfile:///var/lib/baton/redis-master?db=0&password=...&namespace=baton

(the path is absolute; ``db`` defaults to 0; ``password`` is redacted wherever the URL is
shown). Workers use :func:`master_client` (redis-py's synchronous client, what most workers
use) or :func:`async_master_client`; ``baton.failover.master_client`` re-exports the former.

Why the guarantee holds: the client answers ``invalidated`` only after the emptied file is on
disk, and every later command of every worker on that host starts with the ``stat`` that sees
it. A command that passed its check just before has already been sent; a planned switch pauses
writes on the old master before it hands over (see :mod:`baton.failover.server`), so such a
write is either replicated before the new master is promoted or refused. Clients built here
never retry a command on their own (redis-py's default retries would send a failed command
again, possibly to the old master after the file was emptied).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote, unquote

import redis
import redis.asyncio as aioredis
from redis.asyncio.retry import Retry as AsyncRetry
from redis.backoff import NoBackoff
from redis.retry import Retry

from baton.errors import ConfigError, NoMaster
from baton.store.base import FeedListener
from baton.store.redis import RedisStore

SCHEME = "redis+masterfile"


@dataclass(frozen=True, slots=True)
class Address:
    """A Redis server's ``host:port``."""

    host: str
    port: int

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


def parse_address(text: str, *, what: str = "Redis address") -> Address:
    """``host:port`` (``[v6]:port`` for IPv6) as an :class:`Address`; :class:`ConfigError`
    with the value when it is not one."""
    host, colon, port = text.strip().rpartition(":")
    host = host.removeprefix("[").removesuffix("]")
    if not colon or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"bad {what} {text!r}: expected host:port, for example 127.0.0.1:6379")
    return Address(host, int(port))


def read_master(path: Path) -> Address | None:
    """The master the file names, or None when it is empty or missing (no master now).

    Raises :class:`ConfigError` when it holds something that is not an address."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ConfigError(f"cannot read master file {path}: {exc.strerror}") from None
    if not text.strip():
        return None
    return parse_address(text, what=f"master in {path}")


def write_master(path: Path, master: Address | None) -> None:
    """Replace the file's content with ``master`` (None: empty it), durably, before returning.

    The new content is written to a temporary file in the same directory, flushed to disk and
    renamed over the old one: a worker never reads half an address, and the rename gives the
    file a new inode, so even a change within one mtime tick is seen."""
    text = f"{master}\n" if master is not None else ""
    directory = path.parent
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=directory)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        Path(tmp).chmod(0o644)
        Path(tmp).replace(path)
    except BaseException:
        with contextlib.suppress(OSError):
            Path(tmp).unlink()
        raise
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def check_master_path(path: Path) -> Path:
    """Refuse a master file path that cannot work: its directory must exist and be writable,
    and the path must not be a directory. Returns the absolute path."""
    path = Path(path).absolute()
    if path.is_dir():
        raise ConfigError(f"bad master file {path}: it is a directory; give a file path")
    if not path.parent.is_dir():
        raise ConfigError(
            f"bad master file {path}: directory {path.parent} does not exist; create it first"
        )
    if not os.access(path.parent, os.W_OK):
        raise ConfigError(f"bad master file {path}: directory {path.parent} is not writable")
    return path


class MasterFile:
    """Follows one master file: :meth:`changed` is the check made before every command."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._seen: tuple[int, int, int] | None = None
        self.master: Address | None = None

    def changed(self) -> bool:
        """Re-read the file if its ``stat`` changed; True when the master it names changed."""
        try:
            st = self.path.stat()
            key = (st.st_mtime_ns, st.st_ino, st.st_size)
        except FileNotFoundError:
            key = (0, 0, 0)
        if key == self._seen:
            return False
        self._seen = key
        master = read_master(self.path)
        if master == self.master:
            return False
        self.master = master
        return True

    def require(self) -> Address:
        """The current master; :class:`NoMaster` while the file names none."""
        self.changed()
        if self.master is None:
            raise NoMaster(
                f"master file {self.path} is empty: a Redis master switch is under way (or no "
                "configuration client has written it yet); retry when it names the new master"
            )
        return self.master


# -- workers: redis-py clients -------------------------------------------------------------------


class MasterClient(redis.Redis):
    """A synchronous redis-py client that follows a master file (see :func:`master_client`)."""

    def __init__(self, path: Path, **options: Any) -> None:
        self._master_file = MasterFile(path)
        self._options = {"retry": Retry(NoBackoff(), 0), **options}
        self._options.pop("host", None)
        self._options.pop("port", None)
        # A placeholder pool that is never used: the first command's check replaces it.
        super().__init__(host="127.0.0.1", port=1, **self._options)
        self._pool_master: Address | None = None

    def _follow(self) -> None:
        master = self._master_file.require()
        if master != self._pool_master:
            old = self.connection_pool
            self.connection_pool = redis.ConnectionPool(
                host=master.host, port=master.port, **self._pool_options()
            )
            self._pool_master = master
            old.disconnect()

    def _pool_options(self) -> dict[str, Any]:
        return _pool_options(self._options)

    @property
    def master(self) -> Address | None:
        """The master this client sends commands to (None while the file is empty)."""
        self._master_file.changed()
        return self._master_file.master

    def execute_command(self, *args: Any, **options: Any) -> Any:
        self._follow()
        return super().execute_command(*args, **options)  # type: ignore[no-untyped-call]

    def pipeline(self, transaction: bool = True, shard_hint: Any = None) -> Any:
        # Checked when the pipeline is made and again when it executes: its commands go
        # through the pool that was current when it was made.
        self._follow()
        return _MasterPipeline(self, transaction, shard_hint)


class _MasterPipeline(redis.client.Pipeline):
    def __init__(self, owner: MasterClient, transaction: bool, shard_hint: Any) -> None:
        super().__init__(owner.connection_pool, owner.response_callbacks, transaction, shard_hint)
        self._owner = owner

    def execute(self, raise_on_error: bool = True) -> list[Any]:
        self._owner._follow()
        if self.connection_pool is not self._owner.connection_pool:
            self.reset()
            raise NoMaster(
                f"the master in {self._owner._master_file.path} changed while this pipeline "
                "was built: nothing was sent; build it again"
            )
        result: list[Any] = super().execute(raise_on_error)
        return result


def _pool_options(options: dict[str, Any]) -> dict[str, Any]:
    """The client options that are the connection pool's (the rest are the client's own)."""
    keep = (
        "db", "password", "username", "socket_timeout", "socket_connect_timeout",
        "socket_keepalive", "decode_responses", "encoding", "retry", "client_name",
        "health_check_interval",
    )  # fmt: skip
    return {k: v for k, v in options.items() if k in keep}


def master_client(path: str | Path, **options: Any) -> redis.Redis:
    """A redis-py client (``redis.Redis``) for the master named in the master file ``path``.

    Before each command it checks the file's ``stat``; when the file changed it re-reads it
    and, when the address changed, replaces its connection pool (the old pool's connections
    are closed). While the file is empty or missing every command raises
    :class:`~baton.errors.NoMaster` and nothing is sent. ``options`` are redis-py's (``db``,
    ``password``, ``socket_timeout``, ``decode_responses``, ...); retries are off unless
    ``retry`` is given, so that a command is never re-sent behind the worker's back."""
    return MasterClient(Path(path), **options)


class AsyncMasterClient(aioredis.Redis):
    """The asyncio twin of :class:`MasterClient` (see :func:`async_master_client`)."""

    def __init__(self, path: Path, **options: Any) -> None:
        self._master_file = MasterFile(path)
        self._options = {"retry": AsyncRetry(NoBackoff(), 0), **options}
        self._options.pop("host", None)
        self._options.pop("port", None)
        super().__init__(host="127.0.0.1", port=1, **self._options)
        self._pool_master: Address | None = None

    async def _follow(self) -> None:
        master = self._master_file.require()
        if master != self._pool_master:
            old = self.connection_pool
            self.connection_pool = aioredis.ConnectionPool(
                host=master.host,
                port=master.port,
                **_pool_options(self._options),
            )
            self._pool_master = master
            await old.disconnect()

    async def execute_command(self, *args: Any, **options: Any) -> Any:
        await self._follow()
        return await super().execute_command(*args, **options)  # type: ignore[no-untyped-call]


def async_master_client(path: str | Path, **options: Any) -> aioredis.Redis:
    """:func:`master_client` for asyncio (``redis.asyncio.Redis``)."""
    return AsyncMasterClient(Path(path), **options)


# -- baton's own store ---------------------------------------------------------------------------


def parse_store_url(url: str) -> tuple[Path, int, str | None]:
    """``redis+masterfile:///abs/path?db=N&password=P`` (``namespace`` already taken off) as
    (path, db, password). :class:`ConfigError` for anything else."""
    rest = url.split(":", 1)[1]
    path_part, _, query = rest.partition("?")
    if not path_part.startswith("///"):
        raise ConfigError(
            f"bad store URL {SCHEME}:{path_part}: give an absolute master file path, for "
            f"example {SCHEME}:///var/lib/baton/redis-master"
        )
    path = Path(unquote(path_part[2:]))
    db, password = 0, None
    for key, values in parse_qs(query, keep_blank_values=True).items():
        if key == "db" and values[0].isdigit():
            db = int(values[0])
        elif key == "password":
            password = values[0]
        else:
            raise ConfigError(
                f"bad option {key!r} in a {SCHEME} store URL: use db=N, password=... or "
                "namespace=NAME"
            )
    if path.is_dir() or not path.parent.is_dir():
        raise ConfigError(
            f"bad master file {path} in a {SCHEME} store URL: give a file in an existing "
            "directory (the one the configuration client writes)"
        )
    return path, db, password


class MasterFileRedisStore(RedisStore):
    """The Redis store, following a master file: before each request it checks the file as
    :class:`MasterClient` does, and moves its connection pools to the new master when the file
    names another one; while it is empty every request raises :class:`~baton.errors.NoMaster`
    (a :class:`~baton.errors.StoreUnavailable`, so leaders stop renewing and stand down, as for
    any unreachable store).

    Fencing epochs stay monotonic across a switch: the data (with every epoch counter) is
    replicated to the new master, and each epoch is at least the store clock; the
    configuration server does not announce a new master before that master's clock has passed
    the last time it read on the old one."""

    follows_master_file = True

    def __init__(self, path: Path, *, db: int = 0, password: str | None = None,
                 namespace: str = "baton") -> None:  # fmt: skip
        self._master_file = MasterFile(path)
        self._db = db
        self._password = password
        super().__init__(self._url_for(Address("127.0.0.1", 1)), namespace=namespace)
        shown = f"{SCHEME}://{path}?db={db}" + ("&password=***" if password else "")
        self.url = shown
        self._at: Address | None = None
        self._retired: list[aioredis.Redis] = []

    def _url_for(self, master: Address) -> str:
        auth = f":{quote(self._password, safe='')}@" if self._password else ""
        host = f"[{master.host}]" if ":" in master.host else master.host
        return f"redis://{auth}{host}:{master.port}/{self._db}"

    async def connect(self) -> None:
        master = self._master_file.require()
        self._raw_url = self._url_for(master)
        self._at = master
        await super().connect()

    def _require(self) -> aioredis.Redis:
        client = super()._require()
        master = self._master_file.require()
        if master == self._at:
            return client
        # The file names another master: new pools for it. The old ones are closed when the
        # store closes (requests still running on them finish or fail on their own).
        self._raw_url = self._url_for(master)
        new_client, new_feed = self._make_clients(self._raw_url)
        self._retired += [c for c in (self._client, self._feed_client) if c is not None]
        self._client, self._feed_client = new_client, new_feed
        self._at = master
        return new_client

    @contextlib.asynccontextmanager
    async def _listen(self) -> AsyncIterator[FeedListener]:
        self._require()
        async with super()._listen() as listener:
            yield listener

    async def close(self) -> None:
        retired, self._retired = self._retired, []
        for client in retired:
            with contextlib.suppress(redis.RedisError, OSError):
                await client.aclose()
        await super().close()


__all__ = [
    "SCHEME",
    "Address",
    "AsyncMasterClient",
    "MasterClient",
    "MasterFile",
    "MasterFileRedisStore",
    "async_master_client",
    "check_master_path",
    "master_client",
    "parse_address",
    "parse_store_url",
    "read_master",
    "write_master",
]
