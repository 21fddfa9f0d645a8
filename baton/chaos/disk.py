"""Where the campaign's cascade node databases live, and the small disk one of them lives on.

The branch ``s2`` keeps its database on a disk of its own (a tmpfs mounted in the run's
directory), so that the nemesis can fill it: its apply and its queue must then wait and go on,
with nothing lost or applied twice.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sqlite3
import subprocess
from pathlib import Path
from typing import Any

from baton.chaos.history import History

#: The node whose database lives on a small disk of its own (a tmpfs), for the disk-full fault.
SMALL_DISK_NODE = "s2"
SMALL_DISK_SIZE = "256m"


def node_db(run: Path, node: str) -> Path:
    """The SQLite file of cascade node ``node`` in the campaign directory ``run``."""
    base = run / "cascade"
    return (base / "disk" if node == SMALL_DISK_NODE else base) / f"{node}.db"


def unmount_stale(run: Path) -> None:
    """Unmount the small disk a killed campaign left mounted in ``run``."""
    disk = node_db(run, SMALL_DISK_NODE).parent
    if disk.is_dir():
        subprocess.run(["umount", "-l", str(disk)], check=False, capture_output=True)


class SmallDisk:
    """The small disk of :data:`SMALL_DISK_NODE` in the campaign directory ``run``: mounted
    when made (before any process starts, so that every host's mount namespace has it), filled
    and freed by the disk-full fault, released when the run ends."""

    def __init__(self, run: Path, history: History) -> None:
        self.run = run
        self.history = history
        self.path = node_db(run, SMALL_DISK_NODE).parent
        self.path.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={SMALL_DISK_SIZE}", "tmpfs", str(self.path)],
            check=True,
            capture_output=True,
        )

    def fill(self) -> None:
        """Take every free byte (the disk-full fault), right after an operator's checkpoint
        emptied the database's write-ahead log: without it, the log's room (a few MB, reused
        after every checkpoint) absorbs minutes of writes and the node never sees the disk
        full."""
        db_path = node_db(self.run, SMALL_DISK_NODE)
        checkpoint: Any = None
        with contextlib.suppress(sqlite3.Error):
            db = sqlite3.connect(db_path, timeout=5)
            try:
                checkpoint = db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
            finally:
                db.close()
        fd = os.open(self.path / "filler", os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            # In steps until the disk refuses: one request for all the free space fails whole
            # when the node writes meanwhile.
            size = 0
            for step in (1 << 20, 1 << 12):
                while True:
                    try:
                        os.posix_fallocate(fd, size, step)
                    except OSError:
                        break
                    size += step
        finally:
            os.close(fd)
        free = os.statvfs(self.path)
        wal = db_path.with_suffix(".db-wal")
        self.history.record(
            "disk-filled",
            checkpoint=checkpoint,
            wal_bytes=wal.stat().st_size if wal.exists() else None,
            free_bytes=os.statvfs(self.path).f_bavail * free.f_frsize,
        )

    def free(self) -> None:
        (self.path / "filler").unlink(missing_ok=True)

    def release(self) -> None:
        """Unmount the disk, keeping what it holds in the same place on the disk below (the
        run's directory keeps every database; call once nothing uses it)."""
        self.free()
        saved = self.run / "disk-saved"
        shutil.copytree(self.path, saved, dirs_exist_ok=True)
        subprocess.run(["umount", "-l", str(self.path)], check=False, capture_output=True)
        shutil.copytree(saved, self.path, dirs_exist_ok=True)
        shutil.rmtree(saved)
