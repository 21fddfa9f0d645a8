"""Store failover on one machine: a group of real Redis servers with replication, and the
configuration roles as real ``baton redis-failover`` processes (what the tests and the benchmark
run).

::

    with RedisGroup(tmp / "redis", 3) as group:
        clients = [failover_client(tmp, "a"), failover_client(tmp, "b")]
        server = failover_server(tmp, group, clients, "s1")
        wait_for(lambda: all(c.master() == group.addresses[0] for c in clients))
"""

from __future__ import annotations

import json
import sys
import threading
import urllib.request
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from baton.errors import NoMaster
from baton.local.ports import free_port
from baton.local.processes import Proc
from baton.local.waiting import wait_for
from baton.store.master_file import Address, master_client, read_master
from baton.testing.servers import RedisServer

#: Quick timings for tests: a dead master is noticed within about a second.
FAST = (
    "--check-interval", "0.1", "--retries", "2", "--request-timeout", "0.3",
    "--reconfigure-interval", "0.3",
)  # fmt: skip


def baton_exe() -> str:
    return str(Path(sys.executable).with_name("baton"))


class RedisGroup:
    """``count`` Redis servers; the first is the master, the others replicate it."""

    def __init__(self, directory: Path, count: int = 3, persist: bool = False) -> None:
        self.servers = [
            RedisServer(Path(directory) / f"r{i}", persist=persist) for i in range(count)
        ]

    @property
    def addresses(self) -> list[Address]:
        return [Address("127.0.0.1", s.port) for s in self.servers]

    @property
    def spec(self) -> str:
        """``H:P,H:P,...`` for ``--redis-servers``."""
        return ",".join(str(a) for a in self.addresses)

    def client(self, i: int, timeout: float = 2.0) -> redis.Redis:
        # No retries: redis-py's default retries a timed-out call three times, so asking a
        # paused server would take seconds instead of ``timeout``.
        return redis.Redis(
            port=self.servers[i].port,
            socket_timeout=timeout,
            socket_connect_timeout=timeout,
            retry=Retry(NoBackoff(), 0),
        )

    def start(self) -> Self:
        for s in self.servers:
            s.start()
            with self.client(self.servers.index(s)) as r:
                r.config_set("repl-diskless-sync-delay", 0)
        master = self.servers[0].port
        for i in range(1, len(self.servers)):
            with self.client(i) as r:
                r.replicaof("127.0.0.1", master)
        for i in range(1, len(self.servers)):
            wait_for(partial(self.link_up, i), timeout=20, what=f"replica {i} in sync")
        return self

    def link_up(self, i: int) -> bool:
        with self.client(i) as r:
            return bool(r.info("replication").get("master_link_status") == "up")

    def role(self, i: int) -> str | None:
        """``master`` or ``slave``; None when the server does not answer."""
        if not self.servers[i].running:
            return None
        try:
            with self.client(i, timeout=0.2) as r:
                return str(r.info("replication")["role"])
        except (redis.RedisError, OSError):
            return None

    def masters(self) -> list[Address]:
        """The servers that answer and say they are a master."""
        return [a for i, a in enumerate(self.addresses) if self.role(i) == "master"]

    def stop(self) -> None:
        for s in self.servers:
            s.resume()
            s.stop()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


@dataclass
class ClientRole:
    """A ``baton redis-failover client`` process."""

    id: str
    port: int
    master_file: Path
    proc: Proc

    @property
    def spec(self) -> str:
        return f"{self.id}@127.0.0.1:{self.port}"

    def master(self) -> Address | None:
        return read_master(self.master_file)

    def state(self) -> dict[str, Any] | None:
        return _get_json(f"http://127.0.0.1:{self.port}/v1/state")


def failover_client(
    tmp: Path, cid: str, *, port: int | None = None, answer_as: str | None = None, run: int = 1,
    via_config: bool = False,
) -> ClientRole:  # fmt: skip
    """Start a client role; ``answer_as`` starts it under another id (a misconfigured host);
    ``port`` and a higher ``run`` start it again where it ran (same files, new log);
    ``via_config`` gives its settings in a TOML file instead of options."""
    port = port or free_port()
    home = tmp / f"client-{cid}"
    home.mkdir(parents=True, exist_ok=True)
    master_file = home / "redis-master"
    settings = {
        "client_id": answer_as or cid, "master_file": str(master_file),
        "listen": f"127.0.0.1:{port}", "check_timeout": 1,
    }  # fmt: skip
    argv = [baton_exe(), "redis-failover", "client", *_options(home, settings, via_config)]
    log = f"client-{cid}.out" if run == 1 else f"client-{cid}-{run}.out"
    proc = Proc(f"client-{cid}", argv, tmp / log)
    role = ClientRole(cid, port, master_file, proc)
    wait_for(lambda: role.state() is not None or proc.popen.poll() is not None, timeout=20)
    return role


@dataclass
class ServerRole:
    """A ``baton redis-failover server`` process with its status API."""

    id: str
    port: int
    proc: Proc

    def status(self) -> dict[str, Any] | None:
        return _get_json(f"http://127.0.0.1:{self.port}/v1/status")

    def metrics(self) -> str:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=2) as res:
                return str(res.read().decode())
        except OSError:
            return ""

    def said(self, text: str) -> str | None:
        """The first log line containing ``text``."""
        return next((line for line in self.proc.lines() if text in line), None)

    def switches(self) -> int:
        return sum("master switched" in line for line in self.proc.lines())


def failover_server(
    tmp: Path, group: RedisGroup, clients: list[ClientRole], sid: str, *,
    via_config: bool = False,
) -> ServerRole:  # fmt: skip
    """Start a server role with the :data:`FAST` timings and its status API."""
    port = free_port()
    settings: dict[str, Any] = {
        "redis_servers": group.spec, "client_ids": ",".join(c.spec for c in clients),
        "server_id": sid, "listen": f"127.0.0.1:{port}",
    }  # fmt: skip
    settings.update(zip(FAST[::2], FAST[1::2], strict=True))
    home = tmp / f"server-{sid}"
    home.mkdir(parents=True, exist_ok=True)
    argv = [baton_exe(), "redis-failover", "server", *_options(home, settings, via_config)]
    proc = Proc(f"server-{sid}", argv, tmp / f"server-{sid}.out")
    role = ServerRole(sid, port, proc)
    wait_for(lambda: role.status() is not None or proc.popen.poll() is not None, timeout=20)
    return role


def _options(home: Path, settings: dict[str, Any], via_config: bool) -> list[str]:
    """``settings`` as command-line options, or as a TOML file given with ``--config``."""
    if not via_config:
        out: list[str] = []
        for key, value in settings.items():
            out += [key if key.startswith("--") else "--" + key.replace("_", "-"), str(value)]
        return out
    lines = []
    for key, value in settings.items():
        name = key.removeprefix("--").replace("-", "_")
        quoted = isinstance(value, str) and not value.replace(".", "").isdigit()
        lines.append(f"{name} = {json.dumps(value) if quoted else value}")
    path = home / "failover.toml"
    path.write_text("[redis_failover]\n" + "\n".join(lines) + "\n")
    return ["--config", str(path)]


def _get_json(url: str) -> dict[str, Any] | None:
    try:
        with urllib.request.urlopen(url, timeout=2) as res:
            data = json.loads(res.read())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


__all__ = [
    "FAST",
    "ClientRole",
    "RedisGroup",
    "ServerRole",
    "failover_client",
    "failover_server",
]


class IncrWorker(threading.Thread):
    """A worker on a client's host: INCRs ``key`` through the host's master file (with
    :func:`~baton.store.master_file.master_client`) until stopped, counting the INCRs a master
    acknowledged in ``acked`` and those sent without an answer (applied or not) in ``unsure``.
    ``pace``: seconds between INCRs (0: as fast as it can)."""

    def __init__(self, master_file: Path, key: str = "acked", pace: float = 0.0) -> None:
        super().__init__(daemon=True)
        self.key = key
        self.pace = pace
        self.client = master_client(master_file, socket_timeout=2, socket_connect_timeout=0.5)
        self.acked = 0
        self.unsure = 0
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.is_set():
            try:
                self.client.incr(self.key)
                self.acked += 1
            except NoMaster:
                # Its file is empty (a switch is under way): nothing was sent.
                self.stopping.wait(0.002)
                continue
            except (redis.RedisError, OSError):
                # Sent, but no answer came (a timeout, the server gone): it may have been
                # applied.
                self.unsure += 1
                self.stopping.wait(0.002)
                continue
            if self.pace:
                self.stopping.wait(self.pace)

    def stop(self) -> None:
        self.stopping.set()
        self.join(5)
        self.client.close()
