from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

import baton
from baton.errors import redact_url
from baton.lease import supervisor
from baton.lease.sync import SyncElection
from baton.lease.timings import Timings

#: The public API, written out: a name that disappears from ``baton`` (or appears there) fails
#: this test, and has to be a decision (docs/python-api.md lists the same names).
PUBLIC = [
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
    "NodeDatabaseError",
    "NodeUnreachable",
    "NotFinished",
    "NotLeader",
    "NoWritableRoot",
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


def test_public_api_is_exactly_this() -> None:
    assert sorted(baton.__all__) == sorted(PUBLIC)
    assert len(set(baton.__all__)) == len(baton.__all__)
    for name in PUBLIC:
        assert getattr(baton, name) is not None, name
    namespace: dict[str, object] = {}
    exec("from baton import *", namespace)
    assert set(PUBLIC) - {"__version__"} <= set(namespace)


def test_lazy_names_are_the_real_ones() -> None:
    from baton.cascade.writer import RootWriter, connect_root
    from baton.placement.workload import Workload, WorkloadContext
    from baton.spark.session import register

    assert baton.RootWriter is RootWriter and baton.connect_root is connect_root
    assert baton.Workload is Workload
    assert baton.WorkloadContext is WorkloadContext
    assert baton.register_spark is register
    assert {"Workload", "WorkloadContext", "register_spark"} <= set(dir(baton))
    with pytest.raises(AttributeError, match="no_such_name"):
        _ = baton.no_such_name


def test_import_baton_loads_only_the_core() -> None:
    # Importing any part of baton runs baton/__init__.py first: it must not drag in placement,
    # Spark or the node (nor their dependencies) for someone who only wants an election.
    code = (
        "import sys, baton; "
        "print(sorted(m.split('.')[0] if not m.startswith('baton') else m for m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-I", "-c", code], capture_output=True, text=True, check=True
    ).stdout
    loaded = set(ast.literal_eval(out))
    assert {m for m in loaded if m.startswith("baton.")} <= {
        "baton.backoff",
        "baton.clock",
        "baton.lease",
        "baton.lease.election",
        "baton.errors",
        "baton.lease.keeper",
        "baton.logs",
        "baton.store",
        "baton.store.base",
        "baton.lease.sync",
        "baton.lease.timings",
    }
    assert not loaded & {"pyspark", "pydantic", "fastapi", "httpx", "prometheus_client"}


def test_docs_list_the_public_api() -> None:
    doc = (Path(__file__).parents[2] / "docs" / "python-api.md").read_text()
    listed = set(re.findall(r"`([A-Za-z_]+)`", doc))
    missing = sorted(set(PUBLIC) - listed)
    assert not missing, f"docs/python-api.md does not mention {missing}"


def test_guard_imports_only_the_standard_library() -> None:
    # It runs as a file so it cannot be broken by (or slowed down by) the rest of baton.
    guard = Path(supervisor.GUARD)
    assert guard.is_file()
    out = subprocess.run(
        [sys.executable, "-I", "-c", f"import runpy,sys; runpy.run_path({str(guard)!r}, "
         "run_name='not_main'); print(sorted(m for m in sys.modules if m.startswith('baton')))"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert out.stdout.strip() == "[]"


def test_redact_url_hides_secrets() -> None:
    assert redact_url("redis://:pw@h:1/0") == "redis://:***@h:1/0"
    assert redact_url("postgresql://u:pw@h/db?password=x") == "postgresql://u:***@h/db?password=***"
    assert redact_url("sqlite:///a.db") == "sqlite:///a.db"


def test_sync_facade_leads_and_resigns(tmp_path: Path) -> None:
    t = Timings.for_ttl(2.0)
    url = f"sqlite://{tmp_path / 's.db'}"
    with SyncElection(url, "job", "a", t) as a, SyncElection(url, "job", "b", t) as b:
        first = a if a.wait_leader(10) == "a" else b
        second = b if first is a else a
        term = first.wait_leadership(10)
        assert first.is_leader and first.epoch == term.epoch
        first.elect(second.election.node_id)
        new = second.wait_leadership(10)
        assert new.epoch > term.epoch and not term.valid
