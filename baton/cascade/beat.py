"""Whether a node is served: the heartbeat its service writes into the node's own database.

A node's position and ticks say what it has done, not whether anything still runs there: with
every ticker and worker stopped, a set looks caught up. So the process serving a node (``baton
cascade run``, a ``cascade-worker`` object, a test harness) writes a :class:`Beat` every
:data:`INTERVAL` seconds under the node's local key ``service``: who serves it, at which worker
epoch, what it does (:class:`Phase`) and what it waits for. ``cascade status`` reads it
(:meth:`Beat.state`), and ``switchover`` refuses a target that is not applying.

The beat lives in the node database, not in the store: status needs no store, and a beat is
fenced like every write of a worker (one from an epoch below the node's or the last beat's is
dropped, so a paused old service cannot claim it serves the node).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import Any

from baton.cascade.db import NodeDB, open_node_db
from baton.errors import BatonError
from baton.logs import describe

log = logging.getLogger("baton.cascade")

#: Seconds between two beats: twice a second, so that automatic failover's guard
#: (:data:`baton.service.reach.QUIET_AFTER`) knows within 1.5 s that nothing serves a root.
INTERVAL = 0.5
#: A beat older than this says nothing runs any more (the process was killed or is frozen):
#: twenty beats, so that a loaded machine's late thread is not taken for a dead service.
SILENT_AFTER = 10.0
_KEY = "service"


class Phase(StrEnum):
    """What the serving process is doing."""

    TICKING = "ticking"
    """The root's ticker."""
    STARTING = "starting"
    """Building its Spark session (seconds; tens of seconds on a small machine)."""
    APPLYING = "applying"
    """The worker's query runs."""
    WAITING = "waiting"
    """Its last step failed: ``error`` says on what; it tries again."""


class ServiceState(StrEnum):
    """A node's service as ``cascade status`` shows it."""

    RUNNING = "running"
    STOPPED = "stopped"
    """Its process stopped cleanly (asked to, or its lease lost)."""
    SILENT = "silent"
    """No beat for :data:`SILENT_AFTER` seconds: killed, frozen or cut off."""
    NEVER = "never"
    """No process ever served the node (or one from before beats existed)."""


@dataclass(frozen=True, slots=True)
class Beat:
    holder: str
    """``host:pid`` of the serving process."""
    epoch: int
    at: float
    """Wall-clock time of the beat."""
    phase: Phase
    error: str = ""
    stopped: bool = False

    def state(self, now: float, silent_after: float = SILENT_AFTER) -> ServiceState:
        """As of wall time ``now``; a beat older than ``silent_after`` seconds is SILENT."""
        if self.stopped:
            return ServiceState.STOPPED
        if now - self.at > silent_after:
            return ServiceState.SILENT
        return ServiceState.RUNNING

    def as_dict(self, now: float) -> dict[str, Any]:
        out = asdict(self)
        out["state"] = self.state(now).value
        return out


def holder() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def read(db: NodeDB) -> Beat | None:
    """The node's last beat (None: never served, or the value is not one baton wrote)."""
    raw = db.get_local(_KEY)
    if raw is None:
        return None
    try:
        data = json.loads(raw)
        return Beat(
            holder=str(data["holder"]),
            epoch=int(data["epoch"]),
            at=float(data["at"]),
            phase=Phase(data["phase"]),
            error=str(data.get("error", "")),
            stopped=bool(data.get("stopped", False)),
        )
    except (ValueError, KeyError, TypeError):
        return None


def write(db: NodeDB, beat: Beat) -> bool:
    """Store ``beat`` unless a newer epoch serves the node; whether it was stored."""
    with db.transaction() as cur:
        if db.state().epoch > beat.epoch:
            return False
        last = read(db)
        if last is not None and last.epoch > beat.epoch:
            return False
        db.set_local(cur, _KEY, json.dumps(asdict(beat)))
    return True


class Heartbeat:
    """A daemon thread that beats for the node at ``location`` until :meth:`stop`, which
    writes a last beat saying the service stopped. ``phase`` is asked each beat (what the
    service does now, and its error)."""

    def __init__(self, location: str, epoch: int, phase: Callable[[], tuple[Phase, str]]) -> None:
        self.location = location
        self.epoch = epoch
        self._phase = phase
        self._holder = holder()
        self._halt = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="baton-beat")

    def start(self) -> None:
        """Beat once now (a caller that checks right after sees it), then every
        :data:`INTERVAL` seconds."""
        self._beat()
        self._thread.start()

    def _beat(self, stopped: bool = False) -> None:
        phase, error = self._phase()
        beat = Beat(self._holder, self.epoch, time.time(), phase, error, stopped)
        try:
            with open_node_db(self.location) as db:
                write(db, beat)
        except (BatonError, OSError) as exc:
            # The node database is unreachable or busy: the service says so itself; a beat
            # missed here shows as a late one.
            log.debug("beat not written", extra={"location": self.location, "error": describe(exc)})

    def _run(self) -> None:
        while not self._halt.wait(INTERVAL):
            self._beat()

    def stop(self) -> None:
        if self._halt.is_set():
            return
        self._halt.set()
        with contextlib.suppress(RuntimeError):  # never started
            self._thread.join(timeout=5)
        self._beat(stopped=True)
