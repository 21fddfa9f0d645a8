"""A one-node etcd server on free loopback ports, the reference of the failover benchmark."""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path
from types import TracebackType
from typing import Self

import httpx

from baton.testing.servers import free_port
from bench.common import BenchError


class EtcdServer:
    """``etcd`` as a child process with its data in ``directory``; stopped by PID."""

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)
        self.client_port = free_port()
        self.peer_port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """The client URL (also the JSON gateway: ``/v3/...``)."""
        return f"http://127.0.0.1:{self.client_port}"

    def start(self, timeout: float = 15.0) -> Self:
        exe = shutil.which("etcd")
        if exe is None:
            raise BenchError(
                "etcd is not installed: apt-get install etcd-server etcd-client "
                "(or run `BATON_BENCH=1 ./scripts/setup.sh`)"
            )
        self.directory.mkdir(parents=True, exist_ok=True)
        peer = f"http://127.0.0.1:{self.peer_port}"
        log = (self.directory / "etcd.log").open("wb")
        try:
            self.proc = subprocess.Popen(
                [
                    exe,
                    "--name", "bench",
                    "--data-dir", str(self.directory / "data"),
                    "--listen-client-urls", self.url,
                    "--advertise-client-urls", self.url,
                    "--listen-peer-urls", peer,
                    "--initial-advertise-peer-urls", peer,
                    "--initial-cluster", f"bench={peer}",
                    "--initial-cluster-state", "new",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )  # fmt: skip
        finally:
            log.close()  # the child has its own descriptor
        deadline = time.monotonic() + timeout
        while True:
            try:
                if httpx.get(f"{self.url}/health", timeout=1.0).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise BenchError(
                    f"etcd did not become healthy on {self.url}; see {self.directory / 'etcd.log'}"
                )
            time.sleep(0.02)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
