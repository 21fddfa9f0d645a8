"""Real network partitions between local processes, with nftables (root only).

Each :class:`Firewall` owns one nftables table (named after the process, so parallel test runs do
not collide) with an output-hook chain; :meth:`Firewall.block` drops TCP packets from one local
address to another address and port, which is how a test cuts node A off from node B's API
while B still reaches everyone else. Processes must use distinct loopback addresses
(``LocalCluster(distinct_hosts=True)``). The table is deleted on :meth:`Firewall.close`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from types import TracebackType
from typing import Self

from baton.errors import ConfigError


class Firewall:
    """Drop rules in a private nftables table."""

    def __init__(self) -> None:
        if shutil.which("nft") is None:
            raise ConfigError("nft not found: install nftables (apt-get install nftables)")
        if os.geteuid() != 0:
            raise ConfigError("network partitions need root (nftables)")
        self.table = f"baton_test_{os.getpid()}"
        self._nft("add", "table", "inet", self.table)
        self._nft(
            "add", "chain", "inet", self.table, "out",
            "{ type filter hook output priority 0 ; policy accept ; }",
        )  # fmt: skip

    def _nft(self, *args: str) -> None:
        res = subprocess.run(["nft", *args], capture_output=True, text=True, check=False)
        if res.returncode != 0:
            raise ConfigError(f"nft {' '.join(args)} failed: {res.stderr.strip()}")

    def block(self, src: str, dst: str, port: int) -> None:
        """Drop TCP from address ``src`` to ``dst:port`` (new and established connections)."""
        self._nft(
            "add", "rule", "inet", self.table, "out",
            "ip", "saddr", src, "ip", "daddr", dst, "tcp", "dport", str(port), "drop",
        )  # fmt: skip

    def heal(self) -> None:
        """Remove every rule."""
        self._nft("flush", "chain", "inet", self.table, "out")

    def close(self) -> None:
        subprocess.run(
            ["nft", "delete", "table", "inet", self.table], capture_output=True, check=False
        )

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
