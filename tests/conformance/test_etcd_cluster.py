"""baton on a three-member etcd cluster: the etcd leader is killed while baton leaders hold their
leases. The fenced log never takes a write from a deposed leader, and a baton leader writes again
within ttl + the etcd election time (plus slack for a loaded 2-core machine)."""

from __future__ import annotations

import itertools
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from baton.lease.timings import Timings
from baton.local.processes import Proc
from baton.testing import EtcdCluster, FencedLog, wait_for
from baton.testing.processes import latest, now, participant

TTL = 2.0
#: etcd's default election timeout: how long followers wait for a dead leader's heartbeat.
ETCD_ELECTION = 1.0
SLACK = 2.0
pytestmark = pytest.mark.cluster


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[EtcdCluster]:
    shm = Path("/dev/shm")
    base = Path(tempfile.mkdtemp(prefix="baton-etcd3-", dir=shm if shm.is_dir() else tmp_path))
    try:
        with EtcdCluster(base) as running:
            yield running
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_etcd_leader_killed_while_baton_leads(cluster: EtcdCluster, tmp_path: Path) -> None:
    url = f"{cluster.store_url}?namespace=c{uuid.uuid4().hex[:8]}"
    log = FencedLog(tmp_path / "fenced.db")
    procs: list[Proc] = [
        participant(tmp_path, url, f"p{i}", tmp_path / "fenced.db", TTL) for i in range(3)
    ]
    try:
        wait_for(lambda: latest(log), timeout=30, what="a baton leader writing")
        killed_at = now()
        cluster.leader().kill()
        # Past the etcd election and one baton ttl: a leader lost to the etcd outage has been
        # replaced by then, so every gap the outage caused is over.
        horizon = killed_at + TTL + ETCD_ELECTION + 0.5
        wait_for(
            lambda: (e := latest(log)) is not None and e.at > horizon,
            timeout=30,
            what="a baton leader writing well after the etcd leader was killed",
        )
        log.check()
        around = [e.at for e in log.entries() if e.at >= killed_at - 1]
        gap = max(b - a for a, b in itertools.pairwise(around))
        bound = TTL + Timings.for_ttl(TTL).election_timeout_max + ETCD_ELECTION + SLACK
        assert gap < bound, f"no baton leader wrote for {gap:.2f}s (bound {bound:.2f}s)"
    finally:
        for p in procs:
            p.stop()
