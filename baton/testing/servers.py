"""Real Redis and PostgreSQL servers for tests and benchmarks, on free loopback ports.

Redis and etcd are supervised child processes (:class:`~baton.local.processes.Proc`);
PostgreSQL is run by its own ``pg_ctl``. Data lives in a directory the caller owns (a pytest temp
dir). Nothing is mocked: this is what baton's own conformance suite runs against, and users can
run theirs the same way::

    with RedisServer(tmp_path / "redis") as redis:
        store = open_store(redis.url)
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import Self

from baton.errors import ServerError
from baton.local.ports import free_port, port_open
from baton.local.processes import Proc

PG_BIN = Path(os.environ.get("BATON_PG_BIN", "/usr/lib/postgresql/15/bin"))


def wait_port(port: int, timeout: float = 10.0) -> None:
    """Wait until something accepts TCP connections on 127.0.0.1:``port``."""
    deadline = time.monotonic() + timeout
    while not port_open(port):
        if time.monotonic() > deadline:
            raise ServerError(f"nothing listens on 127.0.0.1:{port} after {timeout}s")
        time.sleep(0.02)


class RedisServer(Proc):
    """A ``redis-server`` child process, by default without persistence (so a restart loses
    every key, the case baton's epochs must survive). ``persist``: an append-only file synced
    on every write, so a server killed and started again comes back with its data (a master
    restarted after a failover, as an operator's host would do). Started, paused, killed and
    stopped as any :class:`~baton.local.processes.Proc`; :meth:`start` returns once it listens."""

    def __init__(self, directory: Path, port: int | None = None, persist: bool = False) -> None:
        self.directory = Path(directory)
        self.port = port or free_port()
        self.persist = persist
        super().__init__("redis-server", [], self.directory / "redis.out", start=False)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> Self:
        exe = shutil.which("redis-server")
        if exe is None:
            raise ServerError("redis-server is not installed: apt-get install redis-server")
        self.directory.mkdir(parents=True, exist_ok=True)
        self.argv = [
            exe,
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--save", "",
            "--appendonly", "yes" if self.persist else "no",
            "--appendfsync", "always",
            "--dir", str(self.directory),
            "--logfile", str(self.directory / "redis.log"),
        ]  # fmt: skip
        super().start()
        self.wait_ready(
            lambda: port_open(self.port), 10, f"redis-server to listen on 127.0.0.1:{self.port}"
        )
        return self


class EtcdServer(Proc):
    """A one-node ``etcd`` on free loopback ports with its data in ``directory``: a store for
    baton's etcd backend (:attr:`store_url`) and the reference the benchmarks compare baton
    with. ``url`` is also its JSON gateway (``/v3/...``). As a member of an
    :class:`EtcdCluster`, ``name`` and ``cluster`` (``name=peer-url,...``) say who it is."""

    def __init__(self, directory: Path, name: str = "baton-ref", cluster: str = "") -> None:
        self.directory = Path(directory)
        self.member = name
        self.client_port = free_port()
        self.peer_port = free_port()
        self.cluster = cluster or f"{name}={self.peer_url}"
        super().__init__(f"etcd-{name}", [], self.directory / "etcd.log", start=False)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.client_port}"

    @property
    def peer_url(self) -> str:
        return f"http://127.0.0.1:{self.peer_port}"

    @property
    def store_url(self) -> str:
        return f"etcd://127.0.0.1:{self.client_port}/baton"

    def launch(self) -> Self:
        """Start the process without waiting for it to be healthy (a member of a cluster is
        healthy only once a quorum runs)."""
        exe = shutil.which("etcd")
        if exe is None:
            raise ServerError("etcd is not installed: apt-get install etcd-server etcd-client")
        self.directory.mkdir(parents=True, exist_ok=True)
        self.argv = [
            exe,
            "--name", self.member,
            "--data-dir", str(self.directory / "data"),
            "--listen-client-urls", self.url,
            "--advertise-client-urls", self.url,
            "--listen-peer-urls", self.peer_url,
            "--initial-advertise-peer-urls", self.peer_url,
            "--initial-cluster", self.cluster,
            "--initial-cluster-state", "new",
        ]  # fmt: skip
        super().start()
        return self

    def start(self) -> Self:
        self.launch()
        self.wait_healthy()
        return self

    def wait_healthy(self) -> None:
        self.wait_ready(self._healthy, 15, f"etcd to be healthy on {self.url}")

    def lose_data(self) -> None:
        """Stop the server, delete its data and start it again: a cluster restored from
        nothing, the worst restart there is (baton's epochs must still only grow)."""
        self.stop()
        shutil.rmtree(self.directory / "data", ignore_errors=True)
        self.start()

    def is_leader(self) -> bool:
        """Whether this member is the cluster's raft leader now."""
        try:
            req = urllib.request.Request(f"{self.url}/v3/maintenance/status", data=b"{}")
            with urllib.request.urlopen(req, timeout=1) as res:
                status = json.loads(res.read())
        except (OSError, ValueError):
            return False
        return bool(status.get("leader") == status.get("header", {}).get("member_id"))

    def _healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/health", timeout=1) as res:
                return bool(res.status == 200)
        except OSError:
            return False


class EtcdCluster:
    """Three (``size``) etcd members on free loopback ports, each a :class:`EtcdServer` that
    can be killed, paused and started again. ``store_url`` lists every member."""

    def __init__(self, directory: Path, size: int = 3) -> None:
        names = [f"m{i}" for i in range(size)]
        self.members = [EtcdServer(Path(directory) / name, name) for name in names]
        cluster = ",".join(f"{m.member}={m.peer_url}" for m in self.members)
        for member in self.members:
            member.cluster = cluster

    @property
    def store_url(self) -> str:
        hosts = ",".join(f"127.0.0.1:{m.client_port}" for m in self.members)
        return f"etcd://{hosts}/baton"

    def start(self) -> Self:
        for member in self.members:
            member.launch()
        for member in self.members:
            member.wait_healthy()
        return self

    def leader(self, timeout: float = 15.0) -> EtcdServer:
        """The member that leads now (waiting for an election to end)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for member in self.members:
                if member.running and member.is_leader():
                    return member
            time.sleep(0.05)
        raise ServerError(f"no etcd member leads after {timeout}s")

    def stop(self) -> None:
        for member in self.members:
            member.stop()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


class PostgresServer:
    """A PostgreSQL cluster (``initdb`` into ``directory``) run by ``pg_ctl`` on a free port.

    ``initdb`` refuses to run as root, so as root the directory is given to the ``postgres``
    user and the tools run through ``runuser``.
    """

    def __init__(self, directory: Path, port: int | None = None) -> None:
        self.port = port or free_port()
        self._owned: Path | None = None
        if os.geteuid() == 0:
            # The server runs as 'postgres', which cannot enter a root-only temp dir (pytest's
            # are 0700): keep the cluster in a directory of its own that it can reach.
            self._owned = Path(tempfile.mkdtemp(prefix="baton-pg-"))
            self.directory = self._owned
        else:
            self.directory = Path(directory)
        self.data = self.directory / "data"

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, *args: str) -> None:
        cmd = [str(PG_BIN / args[0]), *args[1:]]
        if os.geteuid() == 0:
            cmd = ["runuser", "-u", "postgres", "--", *cmd]
        res = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if res.returncode != 0:
            raise ServerError(f"{args[0]} failed: {res.stderr.strip() or res.stdout.strip()}")

    def start(self) -> Self:
        if not (PG_BIN / "initdb").exists():
            raise ServerError(
                f"PostgreSQL is not installed in {PG_BIN}: apt-get install postgresql"
            )
        self.directory.mkdir(parents=True, exist_ok=True)
        if os.geteuid() == 0:
            shutil.chown(self.directory, "postgres")
            self.directory.chmod(0o700)
        if not self.data.exists():
            self._run("initdb", "-D", str(self.data), "-U", "postgres", "-A", "trust", "--no-sync")
        opts = (
            f"-p {self.port} -k {self.directory} -c listen_addresses=127.0.0.1 -c fsync=off "
            "-c synchronous_commit=off -c full_page_writes=off -c max_connections=200"
        )
        self._run(
            "pg_ctl", "-w", "-D", str(self.data), "-l", str(self.directory / "pg.log"),
            "-o", opts, "start",
        )  # fmt: skip
        return self

    @property
    def pid(self) -> int | None:
        pidfile = self.data / "postmaster.pid"
        with contextlib.suppress(OSError, ValueError):
            return int(pidfile.read_text().split()[0])
        return None

    def stop(self, mode: str = "fast") -> None:
        if self.pid is not None:
            with contextlib.suppress(ServerError):
                self._run("pg_ctl", "-w", "-D", str(self.data), "-m", mode, "stop")

    def kill(self) -> None:
        """Crash the server: an immediate shutdown (SIGQUIT to every backend, no checkpoint),
        so that clients lose their connections at once, as with a SIGKILL."""
        self.stop("immediate")

    def restart(self) -> None:
        self.stop()
        self.start()

    @contextlib.contextmanager
    def databases(self, *names: str) -> Iterator[list[str]]:
        """Fresh databases for a test, one per name given (a random suffix is added, so that
        tests sharing the server never meet), as ``postgresql://`` URLs; dropped on exit, even
        with clients still connected."""
        import uuid

        import psycopg

        made = [f"{name}_{uuid.uuid4().hex[:10]}" for name in names]
        with psycopg.connect(self.url, autocommit=True) as admin:
            for db in made:
                admin.execute(f'CREATE DATABASE "{db}"')
        try:
            yield [f"postgresql://postgres@127.0.0.1:{self.port}/{db}" for db in made]
        finally:
            with psycopg.connect(self.url, autocommit=True) as admin:
                for db in made:
                    admin.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
        if self._owned is not None:
            shutil.rmtree(self._owned, ignore_errors=True)
