"""Queue events that are not row changes but still act on every node that applies a batch
(sequences, DDL run through the queue). :func:`apply_special` runs inside the apply
transaction of :func:`baton.cascade.apply.apply_batch`, after the batch's rows."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from baton.cascade.db import NodeDB
from baton.cascade.model import Event, NodeState


def apply_special(db: NodeDB, cur: Any, st: NodeState, events: Sequence[Event]) -> None:
    """Act on the batch's special events at the node ``st`` (in the caller's transaction)."""


__all__ = ["apply_special"]
