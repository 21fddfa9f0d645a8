"""baton: fenced leadership, placement and cascaded replication.

The public API is what this module exports (``__all__``, pinned by ``tests/unit/test_public_api.py``
and listed in ``docs/python-api.md``); everything else is internal.

``import baton`` loads the core only: errors, the store, elections and timings. The extension
points of higher layers (:class:`Workload` and :class:`WorkloadContext` of placement,
:func:`register_spark`, which adds ``format("baton")`` to a SparkSession, and the cascade's
writer helpers :func:`connect_root` and :class:`RootWriter`) are imported on first use (PEP 562),
so that importing any part of baton never loads placement, the cascade or anything of Spark.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from baton.errors import (
    BatonError,
    CascadeError,
    CascadeInputError,
    ConfigError,
    FeedCompacted,
    FencedOut,
    LeaseError,
    LeaseLost,
    LossReason,
    NodeDatabaseError,
    NodeUnreachable,
    NotFinished,
    NotLeader,
    NoWritableRoot,
    Refused,
    RootMoved,
    SpecError,
    StaleEpoch,
    StoreError,
    StoreTimeout,
    StoreUnavailable,
    SyncTimeout,
    SyncUnsafe,
)
from baton.lease.election import (
    Election,
    ElectionEvent,
    LeadershipLost,
    NewLeader,
    NewState,
    State,
    Term,
)
from baton.lease.keeper import LeaseKeeper
from baton.lease.sync import SyncElection
from baton.lease.timings import Timings
from baton.store import (
    Change,
    ChangeKind,
    Delete,
    Lapse,
    Lease,
    LeaseHeld,
    Put,
    Record,
    Store,
    TxnResult,
    VersionIs,
    open_store,
)

if TYPE_CHECKING:
    from baton.cascade.writer import RootWriter, connect_root
    from baton.placement.workload import Workload, WorkloadContext
    from baton.spark.session import register as register_spark

__version__ = "0.1.0"

#: Public name -> (module, attribute), imported when first asked for.
_LAZY = {
    "Workload": ("baton.placement.workload", "Workload"),
    "WorkloadContext": ("baton.placement.workload", "WorkloadContext"),
    "register_spark": ("baton.spark.session", "register"),
    "RootWriter": ("baton.cascade.writer", "RootWriter"),
    "connect_root": ("baton.cascade.writer", "connect_root"),
}


def __getattr__(name: str) -> object:
    try:
        module, attr = _LAZY[name]
    except KeyError:
        raise AttributeError(f"module 'baton' has no attribute {name!r}") from None
    value = getattr(importlib.import_module(module), attr)
    globals()[name] = value  # the next lookup is an ordinary one
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


__all__ = [
    "BatonError",
    "CascadeError",
    "CascadeInputError",
    "Change",
    "ChangeKind",
    "ConfigError",
    "Delete",
    "Election",
    "ElectionEvent",
    "FeedCompacted",
    "FencedOut",
    "Lapse",
    "LeadershipLost",
    "Lease",
    "LeaseError",
    "LeaseHeld",
    "LeaseKeeper",
    "LeaseLost",
    "LossReason",
    "NewLeader",
    "NewState",
    "NoWritableRoot",
    "NodeDatabaseError",
    "NodeUnreachable",
    "NotFinished",
    "NotLeader",
    "Put",
    "Record",
    "Refused",
    "RootMoved",
    "RootWriter",
    "SpecError",
    "StaleEpoch",
    "State",
    "Store",
    "StoreError",
    "StoreTimeout",
    "StoreUnavailable",
    "SyncElection",
    "SyncTimeout",
    "SyncUnsafe",
    "Term",
    "Timings",
    "TxnResult",
    "VersionIs",
    "Workload",
    "WorkloadContext",
    "__version__",
    "connect_root",
    "open_store",
    "register_spark",
]
