from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import baton
from baton.errors import redact_url
from baton.sync import SyncElection
from baton.timings import Timings


def test_public_api_is_exactly_this() -> None:
    assert sorted(baton.__all__) == sorted(
        name
        for name in dir(baton)
        if (not name.startswith("_") and name[0].isupper()) or name in ("open_store", "__version__")
    )
    for name in baton.__all__:
        assert hasattr(baton, name), name


def test_guard_imports_only_the_standard_library() -> None:
    # It runs as a file so it cannot be broken by (or slowed down by) the rest of baton.
    guard = Path(baton.__file__).parent / "guard.py"
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
