"""The benchmark report holds each backend to its own targets: etcd's rows to its issue's
tighter ones (failover p99 <= ttl + 0.2 s, handover p99 <= 10 ms), the others to theirs."""

from __future__ import annotations

from bench.failover import FailoverResult
from bench.handover import HandoverResult
from bench.report import failover_table, handover_table


def _on_target(table: list[str]) -> dict[str, str]:
    """Backend (first cell) -> the "on target" cell of each row of a markdown table."""
    rows = [line.strip("|").split("|") for line in table if line.startswith("| `")]
    header = [c.strip() for c in table[0].strip("|").split("|")]
    col = next(i for i, name in enumerate(header) if "on target" in name)
    return {r[0].strip().strip("`"): r[col].strip() for r in rows}


def test_etcd_is_held_to_its_own_targets() -> None:
    # 20 ms: within the 50 ms of the other backends, past etcd's 10 ms.
    handover = [HandoverResult(b, elect=[0.02] * 10) for b in ("redis", "etcd")]
    marks = _on_target(handover_table(handover, []))
    assert marks["redis"].startswith("yes") and marks["etcd"].startswith("**NO**"), marks
    # ttl + 0.3 s: within ttl + 0.5 s, past etcd's ttl + 0.2 s.
    failover = [
        FailoverResult(s, ttl=2.0, samples=[2.3] * 10) for s in ("baton/redis", "baton/etcd")
    ]
    marks = _on_target(failover_table(failover))
    assert marks["baton/redis"].startswith("yes") and marks["baton/etcd"].startswith("**NO**")
