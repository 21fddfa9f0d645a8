"""The campaign's checker. It reads only what a user could: the history the clients recorded,
the fenced resource and the node databases (plain ``sqlite3``, read-only), never baton's state.

What it proves, each as a list of violations (empty when the property held):

- **fencing**: per lease, in the resource's own order, an accepted epoch never goes back (no
  stale epoch accepted, so two epochs' side effects never interleave), and one epoch has one
  writer; every write a job saw accepted is in the resource as it saw it;
- **writes**: the root holds exactly what the writer saw committed (an acknowledged write lost or
  an unacknowledged one applied is a violation);
- **replication**: every subscriber's ``items`` equals the root's (nothing lost, nothing extra);
- **exactly once**: a subscriber's audit table (a row per row version the apply wrote) has no
  row version twice: events carry whole row images, so this is where a replay shows;
- **leadership**: a placement term and a controller epoch each had one leader in every
  observation;
- **settling**: after every round of faults the cluster settled within the bound.
"""

from __future__ import annotations

import sqlite3
import statistics
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from baton.chaos.history import load


def _ro(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30)


def fencing(resource: Path, history: list[dict[str, Any]]) -> list[str]:
    out: list[str] = []
    db = _ro(resource)
    try:
        rows = db.execute("SELECT seq, lease, epoch, writer FROM writes ORDER BY seq").fetchall()
    finally:
        db.close()
    top: dict[str, int] = {}
    writer_of: dict[tuple[str, int], str] = {}
    by_seq = {}
    for seq, lease, epoch, writer in rows:
        by_seq[seq] = (lease, epoch, writer)
        if epoch < top.get(lease, 0):
            out.append(f"{lease}: epoch {epoch} accepted at seq {seq} after epoch {top[lease]}")
        top[lease] = max(top.get(lease, 0), epoch)
        first = writer_of.setdefault((lease, epoch), writer)
        if first != writer:
            out.append(f"{lease}: epoch {epoch} written by {first} and {writer}")
    for rec in history:
        if rec["kind"] == "fenced" and rec.get("seq") is not None:
            seen = (rec["lease"], rec["epoch"], rec["writer"])
            if by_seq.get(rec["seq"]) != seen:
                out.append(f"accepted write {seen} seq {rec['seq']} is {by_seq.get(rec['seq'])}")
    return out


def writes(root: Path, history: list[dict[str, Any]]) -> list[str]:
    """The root against a model of the writer's committed writes (in its own order)."""
    model: dict[int, int] = {}
    for rec in sorted(
        (r for r in history if r["kind"] == "write" and r["state"] == "ok"), key=lambda r: r["t"]
    ):
        if rec["op"] == "delete":
            model.pop(rec["id"], None)
        else:
            model[rec["id"]] = rec["n"]
    db = _ro(root)
    try:
        have = dict(db.execute("SELECT id, n FROM items WHERE writer = 'w'").fetchall())
    finally:
        db.close()
    return _diff("root vs acknowledged writes", model, have)


def _diff(what: str, want: dict[Any, Any], have: dict[Any, Any]) -> list[str]:
    missing = sorted(set(want) - set(have))
    extra = sorted(set(have) - set(want))
    wrong = sorted(k for k in set(want) & set(have) if want[k] != have[k])
    if not (missing or extra or wrong):
        return []
    return [
        f"{what}: {len(missing)} missing {missing[:5]}, {len(extra)} extra {extra[:5]}, "
        f"{len(wrong)} different {[(k, want[k], have[k]) for k in wrong[:5]]}"
    ]


def replication(cascade: Path, root: str, subscribers: list[str]) -> list[str]:
    def items(node: str) -> dict[int, tuple[int, str]]:
        db = _ro(cascade / f"{node}.db")
        try:
            return {i: (n, w) for i, n, w in db.execute("SELECT id, n, writer FROM items")}
        finally:
            db.close()

    want = items(root)
    out: list[str] = []
    for node in subscribers:
        out += _diff(f"{node} vs {root}", want, items(node))
    return out


def exactly_once(cascade: Path, subscribers: list[str]) -> tuple[list[str], dict[str, int]]:
    out: list[str] = []
    applied: dict[str, int] = {}
    for node in subscribers:
        db = _ro(cascade / f"{node}.db")
        try:
            rows = db.execute("SELECT id, n, op FROM items_applied").fetchall()
        finally:
            db.close()
        applied[node] = len(rows)
        versions = Counter((i, n) for i, n, op in rows if op in ("I", "U"))
        deletes = Counter(i for i, _, op in rows if op == "D")
        twice = sorted(k for k, c in versions.items() if c > 1)
        gone_twice = sorted(k for k, c in deletes.items() if c > 1)
        if twice:
            out.append(f"{node}: {len(twice)} row versions applied twice, e.g. {twice[:5]}")
        if gone_twice:
            out.append(f"{node}: {len(gone_twice)} rows deleted twice, e.g. {gone_twice[:5]}")
    return out, applied


def leadership(history: list[dict[str, Any]]) -> list[str]:
    leaders: dict[tuple[str, Any], set[str]] = defaultdict(set)
    for rec in history:
        if rec["kind"] == "observe-controller" and rec.get("id") is not None:
            leaders[("controller", rec["epoch"])].add(rec["id"])
        elif rec["kind"] == "observe-group" and rec.get("leader") is not None:
            leaders[(rec["group"], rec["term"])].add(rec["leader"])
    return [
        f"{what} term {term} had leaders {sorted(who)}"
        for (what, term), who in sorted(leaders.items(), key=str)
        if len(who) > 1
    ]


def settling(history: list[dict[str, Any]]) -> tuple[list[str], list[float]]:
    times: list[float] = []
    out: list[str] = []
    for rec in history:
        if rec["kind"] == "settle":
            if rec["seconds"] is None:
                out.append(
                    f"round {rec['round']} did not settle within {rec['bound']} s "
                    f"(waiting for {rec.get('waited_for')})"
                )
            else:
                times.append(rec["seconds"])
    return out, times


def percentile(values: list[float], p: float) -> float | None:
    if not values:
        return None
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[int(p) - 1]


def check(
    run: Path, root: str = "s1", subscribers: tuple[str, ...] = ("s2", "s3")
) -> dict[str, Any]:
    """The report of the run in directory ``run`` (see the module docstring)."""
    history = load(run / "history")
    violations: dict[str, list[str]] = {}
    violations["fencing"] = fencing(run / "fenced.db", history)
    cascade = run / "cascade"
    violations["writes"] = writes(cascade / f"{root}.db", history)
    violations["replication"] = replication(cascade, root, list(subscribers))
    violations["exactly_once"], applied = exactly_once(cascade, list(subscribers))
    violations["leadership"] = leadership(history)
    violations["settling"], settle = settling(history)
    faults = Counter(r["fault"] for r in history if r["kind"] == "fault-start")
    fenced = [r for r in history if r["kind"] == "fenced"]
    return {
        "ok": not any(violations.values()),
        "violations": {k: v for k, v in violations.items() if v},
        "faults": sum(faults.values()),
        "faults_by_kind": dict(sorted(faults.items())),
        "fenced_accepted": sum(1 for r in fenced if r.get("seq") is not None),
        "fenced_refused": sum(1 for r in fenced if r.get("seq") is None),
        "writes_acknowledged": sum(
            1 for r in history if r["kind"] == "write" and r["state"] == "ok"
        ),
        "row_versions_applied": applied,
        "rounds": len(settle) + len(violations["settling"]),
        "settle_seconds": {
            "p50": percentile(settle, 50),
            "p99": percentile(settle, 99),
            "max": max(settle, default=None),
        },
    }
