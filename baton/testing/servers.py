"""Real Redis and PostgreSQL servers for tests and benchmarks, on free loopback ports.

Each server is a child process started here and stopped by PID; data lives in a directory the
caller owns (a pytest temp dir). Nothing is mocked: this is what baton's own conformance suite
runs against, and users can run theirs the same way::

    with RedisServer(tmp_path / "redis") as redis:
        store = open_store(redis.url)
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import Self

from baton.errors import ServerError
from baton.local.ports import free_port

PG_BIN = Path(os.environ.get("BATON_PG_BIN", "/usr/lib/postgresql/15/bin"))


def wait_port(port: int, timeout: float = 10.0) -> None:
    """Wait until something accepts TCP connections on 127.0.0.1:``port``."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise ServerError(f"nothing listens on 127.0.0.1:{port} after {timeout}s") from None
            time.sleep(0.02)


class ChildServer:
    """A server run as a child process of this one, stopped by PID (SIGTERM, then SIGKILL)."""

    proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Self:
        raise NotImplementedError

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def kill(self) -> None:
        """SIGKILL the server (a crash)."""
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
        self.proc = None

    def pause(self) -> None:
        if self.proc is not None:
            self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        if self.proc is not None:
            self.proc.send_signal(signal.SIGCONT)

    def restart(self) -> None:
        self.stop()
        self.start()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


class RedisServer(ChildServer):
    """A ``redis-server`` child process, by default without persistence (so a restart loses
    every key, the case baton's epochs must survive). ``persist``: an append-only file synced
    on every write, so a server killed and started again comes back with its data (a master
    restarted after a failover, as an operator's host would do)."""

    def __init__(self, directory: Path, port: int | None = None, persist: bool = False) -> None:
        self.directory = Path(directory)
        self.port = port or free_port()
        self.persist = persist
        self.proc = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> Self:
        exe = shutil.which("redis-server")
        if exe is None:
            raise ServerError("redis-server is not installed: apt-get install redis-server")
        self.directory.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(
            [
                exe,
                "--port", str(self.port),
                "--bind", "127.0.0.1",
                "--save", "",
                "--appendonly", "yes" if self.persist else "no",
                "--appendfsync", "always",
                "--dir", str(self.directory),
                "--logfile", str(self.directory / "redis.log"),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        wait_port(self.port)
        return self


class EtcdServer(ChildServer):
    """A one-node ``etcd`` on free loopback ports with its data in ``directory``: the reference
    the benchmarks compare baton with. ``url`` is also its JSON gateway (``/v3/...``)."""

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)
        self.client_port = free_port()
        self.peer_port = free_port()
        self.proc = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.client_port}"

    def start(self) -> Self:
        exe = shutil.which("etcd")
        if exe is None:
            raise ServerError("etcd is not installed: apt-get install etcd-server etcd-client")
        self.directory.mkdir(parents=True, exist_ok=True)
        peer = f"http://127.0.0.1:{self.peer_port}"
        with (self.directory / "etcd.log").open("wb") as log:
            self.proc = subprocess.Popen(
                [
                    exe,
                    "--name", "baton-ref",
                    "--data-dir", str(self.directory / "data"),
                    "--listen-client-urls", self.url,
                    "--advertise-client-urls", self.url,
                    "--listen-peer-urls", peer,
                    "--initial-advertise-peer-urls", peer,
                    "--initial-cluster", f"baton-ref={peer}",
                    "--initial-cluster-state", "new",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )  # fmt: skip
        deadline = time.monotonic() + 15
        while not self._healthy():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise ServerError(
                    f"etcd did not become healthy on {self.url}; see {self.directory / 'etcd.log'}"
                )
            time.sleep(0.02)
        return self

    def _healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/health", timeout=1) as res:
                return bool(res.status == 200)
        except OSError:
            return False


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
