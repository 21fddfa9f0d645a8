"""Real processes for multi-process tests and the demo: election participants (library and
``baton elect``), signals to kill or pause them, and the leader as the fenced log shows it."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from baton.local.processes import Proc
from baton.testing.fenced import Entry, FencedLog


def participant(tmp: Path, url: str, node_id: str, log: Path, ttl: float) -> Proc:
    """A :mod:`baton.testing.participant` process (an :class:`Election` in a process)."""
    argv = [sys.executable, "-m", "baton.testing.participant", url, "lead", node_id, str(log)]
    return Proc(node_id, [*argv, str(ttl)], tmp / f"{node_id}.out")


def elect_proc(tmp: Path, url: str, node_id: str, log: Path, ttl: float) -> Proc:
    """``baton elect lead -- python -m baton.testing.worker LOG`` as participant ``node_id``."""
    baton = str(Path(sys.executable).with_name("baton"))
    argv = [baton, "elect", "lead", "--store", url, "--ttl", str(ttl), "--id", node_id, "--"]
    worker = [sys.executable, "-m", "baton.testing.worker", str(log)]
    return Proc(node_id, [*argv, *worker], tmp / f"{node_id}.out")


def latest(log: FencedLog) -> Entry | None:
    entries = log.entries()
    return entries[-1] if entries else None


def first_above(log: FencedLog, epoch: int) -> Entry | None:
    return next((e for e in log.entries() if e.epoch > epoch), None)


def last_of(log: FencedLog, epoch: int) -> Entry | None:
    mine = [e for e in log.entries() if e.epoch == epoch]
    return mine[-1] if mine else None


def now() -> float:
    return time.monotonic()
