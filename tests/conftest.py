"""Session fixtures: real Redis, PostgreSQL and etcd servers on free loopback ports, SQLite in a
temp dir, and a ``backend`` parametrised over the three backends the whole suite runs on, with a
fresh namespace per test. etcd is the fourth backend of the conformance suite only
(``tests/conformance/test_store.py`` widens ``backend`` to it), which keeps the suite's time."""

from __future__ import annotations

import os
import re
import shutil
import sys
import tempfile
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from baton.spark.class_archive import ENV_ARCHIVE
from baton.store import Store, open_store
from baton.testing.servers import EtcdServer, PostgresServer, RedisServer

BACKENDS = ("sqlite", "redis", "postgres")


# Every Spark driver the tests start (in this process or in the nodes' processes, which inherit
# the environment) starts from the venv's class archive when `make setup` built one.
os.environ.setdefault(ENV_ARCHIVE, str(Path(sys.prefix) / "spark-classes.jsa"))


#: A test module that starts a Spark JVM, in the test process (a Spark session, the ``spark``
#: fixture) or in a process of its own (``baton cascade run``, an agent serving
#: ``cascade-worker`` objects, the fault campaign, a standalone or Connect cluster, the
#: quickstart and the docs' snippets), or network namespaces shared by name.
_JVM_MODULE = re.compile(
    r"\bSparkSessions?\b|build_session|\bspark: "
    r'|"cascade",\s*"run"|cascade run|cascade-worker|CASCADE_SET|baton\.chaos|Network\('
    r"|StandaloneCluster|ConnectServer|quickstart|run_demo|\"demo\"|doc_snippets"
)
#: The one scope of the JVM tests: see :func:`pytest_xdist_make_scheduler`.
JVM_LANE = "jvm"


def in_jvm_lane(nodeid: str, rootdir: Path, cache: dict[str, bool]) -> bool:
    """Whether the test ``nodeid`` belongs to the JVM lane (by its module's name and source)."""
    module = nodeid.split("::", 1)[0]
    if module not in cache:
        try:
            # Its name too: the quickstart's and the docs' snippets' tests run what they read.
            cache[module] = bool(_JVM_MODULE.search(f"{module}\n{(rootdir / module).read_text()}"))
        except OSError:
            cache[module] = False
    return cache[module]


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``make test`` runs ``-n 2 --dist loadgroup``: every test that starts a Spark JVM goes to
    one worker, as one unit, and runs there one after another (the machine runs one Spark JVM
    at a time, as its memory and two cores are sized for); the other worker runs everything
    else meanwhile (multi-process tests spend most of their time waiting on leases and
    processes). Scopes are told apart here, from test ids, because pytest 9 no longer lets
    xdist's own ``xdist_group`` markers reach the scheduler."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling  # type: ignore[import-untyped]

    rootdir = config.rootpath
    cache: dict[str, bool] = {}

    class Lanes(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            return JVM_LANE if in_jvm_lane(nodeid, rootdir, cache) else nodeid

    return Lanes(config, log)


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    with RedisServer(tmp_path_factory.mktemp("redis")) as server:
        yield server


@pytest.fixture(scope="session")
def postgres_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PostgresServer]:
    with PostgresServer(tmp_path_factory.mktemp("pg")) as server:
        yield server


@pytest.fixture(scope="session")
def etcd_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdServer]:
    # etcd fsyncs every write and 3.4 cannot be told not to: its data goes to memory when the
    # machine has a tmpfs, as Redis runs without persistence and PostgreSQL with fsync=off.
    shm = Path("/dev/shm")
    directory = (
        Path(tempfile.mkdtemp(prefix="baton-etcd-", dir=shm))
        if shm.is_dir() and os.access(shm, os.W_OK)
        else tmp_path_factory.mktemp("etcd")
    )
    try:
        with EtcdServer(directory) as server:
            yield server
    finally:
        if directory.is_relative_to(shm):
            shutil.rmtree(directory, ignore_errors=True)


class Backend:
    """One backend under test: its URL (fresh namespace) and how to restart its server."""

    def __init__(
        self,
        name: str,
        url: str,
        restart: Callable[[], None],
        server: RedisServer | PostgresServer | EtcdServer | None,
    ) -> None:
        self.name = name
        self.url = url
        self.restart = restart
        self.server = server

    def open(self) -> Store:
        return open_store(self.url)


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    return make_backend(request, tmp_path)


def make_backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    """The backend ``request.param`` names, in a fresh namespace."""
    ns = "t" + uuid.uuid4().hex[:12]
    name = str(request.param)
    if name == "sqlite":
        db = tmp_path / "store.db"

        def lose_data() -> None:
            # The SQLite "server" is the file: losing it is the worst restart there is.
            for suffix in ("", "-wal", "-shm"):
                Path(f"{db}{suffix}").unlink(missing_ok=True)

        return Backend(name, f"sqlite://{db}?namespace={ns}", lose_data, None)
    if name == "redis":
        redis: RedisServer = request.getfixturevalue("redis_server")
        return Backend(name, f"{redis.url}?namespace={ns}", redis.restart, redis)
    if name == "etcd":
        etcd: EtcdServer = request.getfixturevalue("etcd_server")
        return Backend(name, f"{etcd.store_url}?namespace={ns}", etcd.lose_data, etcd)
    pg: PostgresServer = request.getfixturevalue("postgres_server")
    return Backend(name, f"{pg.url}?namespace={ns}", pg.restart, pg)


@pytest.fixture
async def store(backend: Backend) -> AsyncIterator[Store]:
    async with backend.open() as s:
        yield s
