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
- **channels**: one upstream per channel at a time: a publication (epoch, offset) carries the
  same data at every host that received it, and no two epochs published over the same time;
  a subscriber is never sent an epoch older than, or an offset at or before, one it already
  received (after a reconnect too: it subscribes again with ``since``);
- **one store master**: with store failover, no two hosts' master files ever named two
  different servers at once (a file is empty while a switch is under way);
- **settling**: after every round of faults the cluster settled within the bound.
"""

from __future__ import annotations

import itertools
import sqlite3
import statistics
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from baton.chaos.cluster import node_db
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


def replication(run: Path, root: str, subscribers: list[str]) -> list[str]:
    def items(node: str) -> dict[int, tuple[int, str]]:
        db = _ro(node_db(run, node))
        try:
            return {i: (n, w) for i, n, w in db.execute("SELECT id, n, writer FROM items")}
        finally:
            db.close()

    want = items(root)
    out: list[str] = []
    for node in subscribers:
        out += _diff(f"{node} vs {root}", want, items(node))
    return out


def exactly_once(run: Path, subscribers: list[str]) -> tuple[list[str], dict[str, int]]:
    out: list[str] = []
    applied: dict[str, int] = {}
    for node in subscribers:
        db = _ro(node_db(run, node))
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


def channels(history: list[dict[str, Any]]) -> tuple[list[str], dict[str, int]]:
    frames = [r for r in history if r["kind"] == "channel-frame"]
    out: list[str] = []
    # One upstream per epoch: an (epoch, offset) published twice differs in its time.
    at: dict[tuple[int, int], tuple[float, str]] = {}
    for r in frames:
        if r["type"] != "pub" or r.get("at") is None:
            continue
        first = at.setdefault((r["epoch"], r["offset"]), (r["at"], r["host"]))
        if first[0] != r["at"]:
            out.append(
                f"epoch {r['epoch']} offset {r['offset']} published twice: at {first[0]:.3f} "
                f"(seen at {first[1]}) and {r['at']:.3f} (seen at {r['host']})"
            )
    # One upstream at a time: each epoch's publications span an interval of the (one, shared)
    # wall clock of the hosts; a later epoch's starts after an earlier one's ends.
    spans: dict[int, tuple[float, float]] = {}
    for (epoch, _), (t, _) in at.items():
        lo, hi = spans.get(epoch, (t, t))
        spans[epoch] = (min(lo, t), max(hi, t))
    ordered = sorted(spans.items())
    for (e1, (_, end)), (e2, (begin, _)) in itertools.pairwise(ordered):
        if begin < end:
            out.append(f"epochs {e1} and {e2} published at once for {end - begin:.3f} s")
    # Per subscriber, nothing older than what it already has.
    top: dict[str, tuple[int, int]] = {}
    repeats = 0
    for r in frames:
        if r["type"] not in ("pub", "gap", "subscribed"):
            continue
        have = top.get(r["host"], (0, 0))
        now = (r["epoch"], r["offset"])
        if r["epoch"] < have[0]:
            out.append(f"{r['host']}: sent {r['type']} of epoch {r['epoch']} after epoch {have[0]}")
        elif r["type"] == "pub" and now <= have:
            repeats += 1
            out.append(f"{r['host']}: sent offset {now} again after {have}")
        top[r["host"]] = max(have, now)
    stats = {
        "publications": len(at),
        "epochs": len(spans),
        "frames": len(frames),
        "reconnects": sum(1 for r in history if r["kind"] == "channel-disconnect"),
        "repeats": repeats,
    }
    return out[:50], stats


def store_master(history: list[dict[str, Any]]) -> tuple[list[str], dict[str, int]]:
    out: list[str] = []
    masters: list[str] = []
    for rec in sorted((r for r in history if r["kind"] == "observe-master-files"), key=_t):
        named = {f for f in rec["files"].values() if f}
        if len(named) > 1:
            out.append(f"master files named {sorted(named)} at once: {rec['files']}")
        if len(named) == 1 and (not masters or masters[-1] != next(iter(named))):
            masters.append(next(iter(named)))
    return out[:50], {
        "observations": sum(1 for r in history if r["kind"] == "observe-master-files"),
        "masters_in_turn": len(masters),
    }


def _t(rec: dict[str, Any]) -> float:
    return float(rec["t"])


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
    violations["writes"] = writes(node_db(run, root), history)
    violations["replication"] = replication(run, root, list(subscribers))
    violations["exactly_once"], applied = exactly_once(run, list(subscribers))
    violations["leadership"] = leadership(history)
    violations["channels"], channel_stats = channels(history)
    violations["store_master"], store = store_master(history)
    violations["settling"], settle = settling(history)
    faults = Counter(r["fault"] for r in history if r["kind"] == "fault-start")
    loads = [float(r["load"][0]) for r in history if r["kind"] == "observe-load"]
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
        # Candidates run again after losing leadership (exit 75), as a service manager would.
        "candidates_restarted": sum(1 for r in history if r["kind"] == "supervisor-restart"),
        "channel": channel_stats,
        "store": store,
        "load_1min": {
            "p50": percentile(loads, 50),
            "max": max(loads, default=None),
        },
        "rounds": len(settle) + len(violations["settling"]),
        "settle_seconds": {
            "p50": percentile(settle, 50),
            "p99": percentile(settle, 99),
            "max": max(settle, default=None),
        },
    }
