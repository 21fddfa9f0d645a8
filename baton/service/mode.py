"""How a cascade worker applies (a small module: the CLI reads it without loading Spark)."""

from __future__ import annotations

from enum import StrEnum


class Mode(StrEnum):
    AUTO = "auto"
    """Low latency while the session has a task slot to spare (one is kept free for table
    copies and micro-batches), else micro-batches: the default, on a local session, a cluster
    and Spark Connect alike (a Connect server's slots are not counted)."""
    MICRO_BATCH = "micro-batch"
    """Structured Streaming micro-batches: nothing held between them, but each pays Spark's
    trigger cost (about 0.25 s a hop)."""
    LOW_LATENCY = "low-latency"
    """One long-running Spark task per worker (:mod:`baton.service.task`): a hop's lag
    without the per-trigger cost, for one task slot per worker, all of them if need be (a
    worker that finds none says so and tries again)."""


MODES = tuple(m.value for m in Mode)
#: The mode of ``baton cascade run`` and of the ``cascade-worker`` workload when none is given.
DEFAULT_MODE = Mode.AUTO
