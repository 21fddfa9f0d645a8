"""baton: fenced leadership, placement and cascaded replication.

The public API is what this module exports (``__all__``); everything else is internal.
"""

from baton.election import (
    Election,
    ElectionEvent,
    LeadershipLost,
    NewLeader,
    NewState,
    State,
    Term,
)
from baton.errors import (
    BatonError,
    ConfigError,
    FeedCompacted,
    LeaseError,
    LeaseLost,
    LossReason,
    NotLeader,
    StaleEpoch,
    StoreError,
    StoreTimeout,
    StoreUnavailable,
)
from baton.keeper import LeaseKeeper
from baton.store import (
    Change,
    ChangeKind,
    Delete,
    Lease,
    LeaseHeld,
    Put,
    Record,
    Store,
    TxnResult,
    VersionIs,
    open_store,
)
from baton.sync import SyncElection
from baton.timings import Timings

__version__ = "0.1.0"

__all__ = [
    "BatonError",
    "Change",
    "ChangeKind",
    "ConfigError",
    "Delete",
    "Election",
    "ElectionEvent",
    "FeedCompacted",
    "LeadershipLost",
    "Lease",
    "LeaseError",
    "LeaseHeld",
    "LeaseKeeper",
    "LeaseLost",
    "LossReason",
    "NewLeader",
    "NewState",
    "NotLeader",
    "Put",
    "Record",
    "StaleEpoch",
    "State",
    "Store",
    "StoreError",
    "StoreTimeout",
    "StoreUnavailable",
    "SyncElection",
    "Term",
    "Timings",
    "TxnResult",
    "VersionIs",
    "__version__",
    "open_store",
]
