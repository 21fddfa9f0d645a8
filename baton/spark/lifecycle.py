"""The Spark sessions a process holds, and their replacement when a JVM dies.

A process has one classic session (one JVM: PySpark holds a single gateway per process) and,
over Spark Connect, any number of named server-side sessions. :class:`SparkSessions` owns
them: the node agent holds one for the node, ``baton cascade run`` uses the process's
(:func:`shared_session`), and a cascade node service asks either for a session again when the
one it holds died under it.

A killed or out-of-memory JVM refuses every later call, for good, and PySpark would hand its
dead gateway to every session built after it: a session whose JVM is gone is dropped
(:func:`~baton.spark.session.forget`) and a new one built on a new JVM, with one log line.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from baton.spark.session import build_session, forget, jvm_alive, where

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger("baton.spark")


@dataclass(frozen=True, slots=True)
class SessionSpec:
    """How a session is built (the arguments of :func:`~baton.spark.session.build_session`).

    ``connect_session`` names the default session's server-side session over Spark Connect
    (a successor that gives the same name reattaches to it); it is ignored on a classic
    master."""

    master: str | None = None
    remote: str | None = None
    conf: Mapping[str, str] = field(default_factory=dict)
    work_dir: Path | None = None
    quiet: bool = False
    app_name: str = "baton"
    connect_session: str | None = None

    def build(self) -> SparkSession:
        """A new session (or, classic, the JVM's active one) as this spec says."""
        return build_session(
            master=self.master,
            remote=self.remote,
            conf=self.conf,
            work_dir=self.work_dir,
            quiet=self.quiet,
            app_name=self.app_name,
            connect_session=self.connect_session,
        )


class SparkSessions:
    """A process's sessions: the default one (:meth:`session`), replaced when its JVM died,
    and named Spark Connect sessions (:meth:`named`). Thread-safe: every method may be called
    from any thread; a build (seconds, a JVM starting) holds the others back, so that two
    threads never start two JVMs."""

    def __init__(self, spec: SessionSpec) -> None:
        self.spec = spec
        self._default: SparkSession | None = None
        self._named: dict[str, SparkSession] = {}
        self._lock = threading.Lock()

    @property
    def connect(self) -> bool:
        """Whether the spec's sessions are Spark Connect ones (given or from the
        environment: :func:`~baton.spark.session.where`)."""
        return where(self.spec.master, self.spec.remote).remote is not None

    def session(self, spec: SessionSpec | None = None) -> SparkSession:
        """The default session: the one held while its JVM lives, else a new one built from
        ``spec`` (by default the one this object was made with)."""
        with self._lock:
            held = self._default
            if held is not None and not jvm_alive(held):
                # Killed or out of memory: everything using it would wait forever on a refused
                # connection. A new JVM, and they go on.
                log.warning("spark's JVM is gone: starting a new one")
                self._drop(held)
                self._default = held = None
            if held is None:
                held = self._default = (spec or self.spec).build()
            return held

    def named(self, name: str) -> SparkSession:
        """The Spark Connect session named ``name`` (built on first use; every process that
        gives the name attaches to the same server-side session). Over a classic master there
        is one JVM, and this is :meth:`session`."""
        if not self.connect:
            return self.session()
        with self._lock:
            found = self._named.get(name)
            if found is None:
                found = self._named[name] = replace(self.spec, connect_session=name).build()
            return found

    def close(self) -> None:
        """Stop every session held (the classic one stops its JVM)."""
        with self._lock:
            held = [*self._named.values(), *([self._default] if self._default else [])]
            self._named.clear()
            self._default = None
        for session in held:
            session.stop()

    def __enter__(self) -> SparkSessions:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @staticmethod
    def _drop(session: SparkSession) -> None:
        """Let go of ``session``, whose JVM died. PySpark's hold on a dead JVM is cleared only
        when the process's current JVM is that dead one: a JVM someone else started since
        lives on, and the next build takes its active session (as Spark does)."""
        if not jvm_alive():
            forget(session)


#: The process's sessions when no owner gives its own (:func:`shared_session`): made by the
#: first call.
_PROCESS: list[SparkSessions] = []
_PROCESS_LOCK = threading.Lock()


def shared_session(
    *,
    master: str | None = None,
    remote: str | None = None,
    conf: Mapping[str, str] | None = None,
    work_dir: Path | None = None,
    quiet: bool = False,
    connect_session: str | None = None,
) -> SparkSession:
    """The process's one SparkSession (one JVM per process, however often leadership comes and
    goes): built by the first call, with its settings, and returned by every later call; a
    session whose JVM died is replaced by one built with the calling one's settings."""
    spec = SessionSpec(master, remote, conf or {}, work_dir, quiet, connect_session=connect_session)
    with _PROCESS_LOCK:
        if not _PROCESS:
            _PROCESS.append(SparkSessions(spec))
        sessions = _PROCESS[0]
    return sessions.session(spec)
