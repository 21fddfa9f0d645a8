"""Epochs as people read them.

An epoch is ``max(store clock in microseconds, last epoch of the name + 1)`` (see
docs/concepts.md), so its digits are, nearly always, the store's clock when the lease was
granted: ``1795834545355109`` is 2026-11-28 02:55:45.355 UTC. Human-facing output shows both,
the full value first (what a fenced resource compares, and what ``--json`` gives alone).
"""

from __future__ import annotations

import datetime as dt

#: Epochs whose time part falls outside these years are shown as plain numbers (a test's
#: small epochs, a group's term counter).
_SANE = (
    dt.datetime(2000, 1, 1, tzinfo=dt.UTC).timestamp() * 1e6,
    dt.datetime(2200, 1, 1, tzinfo=dt.UTC).timestamp() * 1e6,
)


def granted_at(epoch: int) -> dt.datetime | None:
    """When an epoch's time part says it was granted (UTC), or None when it holds no time."""
    if not _SANE[0] <= epoch < _SANE[1]:
        return None
    return dt.datetime.fromtimestamp(epoch / 1e6, tz=dt.UTC)


def epoch_text(epoch: int) -> str:
    """``1795834545355109 (granted 2026-11-28 02:55:45.355 UTC)``; a number that holds no
    time as it is."""
    at = granted_at(epoch)
    if at is None:
        return str(epoch)
    return f"{epoch} (granted {at:%Y-%m-%d %H:%M:%S}.{at.microsecond // 1000:03d} UTC)"
