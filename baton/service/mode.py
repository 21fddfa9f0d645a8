"""How a cascade worker applies (a small module: the CLI reads it without loading Spark)."""

from __future__ import annotations

from enum import StrEnum


class Mode(StrEnum):
    MICRO_BATCH = "micro-batch"
    """Structured Streaming micro-batches (the default; works on Spark Connect too)."""
    LOW_LATENCY = "low-latency"
    """One long-running Spark task per worker (:mod:`baton.service.task`): a hop's lag
    without the per-trigger cost, for one task slot per worker."""


MODES = tuple(m.value for m in Mode)
