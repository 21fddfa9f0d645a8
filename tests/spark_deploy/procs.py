"""The cascade these tests run: root ``s1`` -> branch ``s2`` -> leaf ``s3``, SQLite nodes in the
test's directory (every executor on this host sees it), served by ``baton cascade run``
processes as a user runs them, with a writer at the root."""

from __future__ import annotations

import sys
from pathlib import Path

from baton.cascade import commands
from baton.cascade.db import open_node_db
from baton.cascade.model import Role
from baton.local.processes import Proc
from baton.local.waiting import wait_for
from baton.testing.cascade import root_and_branch, root_ticked
from baton.testing.workload import Writer, create_accounts

BATON = str(Path(sys.executable).with_name("baton"))


def three_nodes(directory: Path) -> dict[str, str]:
    """s1 (root) -> s2 (branch) -> s3 (leaf), each with ``accounts`` (see
    :func:`root_and_branch`: the root's queue is kept whole, to compare event by event)."""
    loc = root_and_branch(directory)
    loc["s3"] = f"sqlite://{directory / 's3'}.db"
    create_accounts(directory / "s3.db")
    commands.create_subscriber(Role.LEAF, "s3", loc["s3"], "s2", loc["s2"])
    commands.add_table(loc["s1"], "accounts", "s3")
    return loc


class Cascade:
    """The three nodes, the root's service and a writer at the root."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.loc = three_nodes(directory)
        self.store = f"sqlite://{directory / 'store.db'}"
        self.procs: list[Proc] = []
        self.writer = Writer(directory / "s1.db", transactions=15, pause=0.05)

    def run(self, name: str, locations: list[str], *options: str) -> Proc:
        """``baton cascade run LOCATIONS --store ... OPTIONS`` (ttl 2 s)."""
        argv = [BATON, "cascade", "run", *locations, "--store", self.store, "--ttl", "2",
                "--spark-dir", str(self.dir / f"spark-{name}"), *options]  # fmt: skip
        proc = Proc(name, argv, self.dir / f"{name}-{len(self.procs)}.log")
        self.procs.append(proc)
        return proc

    def position(self, name: str) -> int:
        with open_node_db(self.loc[name]) as db:
            return db.state().position

    @property
    def written(self) -> list[int]:
        return self.writer.written

    def start_writing(self) -> None:
        self.writer.start()

    def stop_writing(self) -> None:
        self.writer.stop()

    def wait_synced(self, timeout: float = 120) -> int:
        """Wait until the root ticked everything and s2 and s3 applied it, tables copied."""
        last = root_ticked(self.loc["s1"])

        def synced() -> bool:
            for n in ("s2", "s3"):
                with open_node_db(self.loc[n]) as db:
                    if db.state().position < last:
                        return False
                    if any(s != "ok" for s in db.tables().values()):
                        return False
            return True

        wait_for(synced, timeout=timeout, what=f"s2 and s3 to apply tick {last}")
        return last

    def check_equal(self, upto: int) -> None:
        """Every node has the root's rows, and the branch copied each event exactly once."""
        with open_node_db(self.loc["s1"]) as root:
            rows = root.read_rows("accounts")
            root_ids = [e.ev_id for e in root.batch_events(1, upto)]
        for n in ("s2", "s3"):
            with open_node_db(self.loc[n]) as db:
                assert db.read_rows("accounts") == rows, f"{n} differs from the root"
        with open_node_db(self.loc["s2"]) as branch:
            copied = [e.ev_id for e in branch.batch_events(1, upto)]
        assert copied == root_ids and len(copied) == len(set(copied)) > 0

    def close(self) -> None:
        self.stop_writing()
        for proc in self.procs:
            proc.stop()
