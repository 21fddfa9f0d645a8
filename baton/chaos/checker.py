"""The campaign's checker. It reads only what a user could: the history the clients recorded,
the fenced resource and the node databases (plain ``sqlite3``, read-only), never baton's state.

What it proves, each as a list of violations (empty when the property held):

- **fencing**: per lease, in the resource's own order, an accepted epoch never goes back (no
  stale epoch accepted, so two epochs' side effects never interleave), and one epoch has one
  writer; every write a job saw accepted is in the resource as it saw it;
- **writes**: the root holds exactly what the writer saw committed (an acknowledged write lost or
  an unacknowledged one applied is a violation). When the run lost its root, the root is the
  one the failover promoted, and the acknowledged writes stranded on the old root are exactly
  the events ``resurrect`` saved: each saved event is an acknowledged write made before the
  loss, the set never applied it (the new root's audit table), and the root holds every other;
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
import json
import sqlite3
import statistics
from collections import Counter, defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from baton.chaos.disk import node_db
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


#: A stranded write: (op, id, n), n None for a delete (its event carries no row image).
Write = tuple[str, int, int | None]
_OPS = {"I": "insert", "U": "update", "D": "delete"}


def stranded_events(path: Path) -> list[Write]:
    """The writer's events ``resurrect`` saved to ``path`` (JSON lines; none if no file)."""
    if not path.exists():
        return []
    out: list[Write] = []
    for line in path.read_text().splitlines():
        ev = json.loads(line)
        if ev.get("table") != "items" or ev.get("type") not in _OPS:
            continue
        key = _json(ev["key"])
        data = _json(ev.get("data"))
        if key["id"] > 0:  # the settle probes' rows have negative ids
            out.append((_OPS[ev["type"]], key["id"], None if data is None else data["n"]))
    return out


def _json(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else value


def _key(rec: dict[str, Any]) -> Write:
    return (rec["op"], rec["id"], None if rec["op"] == "delete" else rec["n"])


def writes(
    root: Path,
    history: list[dict[str, Any]],
    stranded: Sequence[Write] = (),
    lost_at: float | None = None,
    sync: bool = False,
) -> list[str]:
    """The root against a model of the writer's committed writes (in its own order), leaving
    out the ``stranded`` ones (committed before ``lost_at``, the root's loss). A write whose
    outcome the writer does not know (``unknown``: in sync mode, committed at the root but not
    confirmed in time) may or may not be there, until an acknowledged write of its row.
    ``sync``: the writer ran in synchronous mode, where a commit is acknowledged only once a
    branch holds it: a stranded event may then be only an unconfirmed write; an acknowledged
    one among them is an acknowledged write lost."""
    out: list[str] = []
    left = Counter(stranded)
    model: dict[int, int] = {}
    maybe: dict[int, set[int | None]] = defaultdict(set)
    lost: list[Write] = []
    for rec in sorted(
        (r for r in history if r["kind"] == "write" and r["state"] in ("ok", "unknown")),
        key=lambda r: r["t"],
    ):
        if lost_at is not None and rec["t"] < lost_at and left[_key(rec)] > 0:
            left[_key(rec)] -= 1
            if sync and rec["state"] == "ok":
                lost.append(_key(rec))
            continue
        if rec["state"] == "unknown":
            maybe[rec["id"]].add(None if rec["op"] == "delete" else rec["n"])
            continue
        maybe.pop(rec["id"], None)  # an acknowledged write settles its row
        if rec["op"] == "delete":
            model.pop(rec["id"], None)
        else:
            model[rec["id"]] = rec["n"]
    if lost:
        out.append(
            f"sync mode: {len(lost)} acknowledged writes were stranded on the lost root "
            f"(saved by resurrect, not in the set), e.g. {lost[:5]}"
        )
    unmatched = sorted((k for k, c in left.items() if c > 0), key=str)
    if unmatched:
        out.append(
            f"{len(unmatched)} saved stranded events are no write acknowledged before the "
            f"root's loss, e.g. {unmatched[:5]}"
        )
    db = _ro(root)
    try:
        have = dict(db.execute("SELECT id, n FROM items WHERE writer = 'w'").fetchall())
    finally:
        db.close()
    for id_, values in maybe.items():
        if have.get(id_) in values:  # what the unconfirmed write left (None: gone)
            if id_ in have:
                model[id_] = have[id_]
            else:
                model.pop(id_, None)
    return out + _diff("root vs acknowledged writes", model, have)


def acknowledged_held(
    audit: Path, history: list[dict[str, Any]], lost_at: float | None, failed_over_at: float | None
) -> list[str]:
    """Sync mode: every write acknowledged before the root's loss had reached the branch that
    became the root, by the failover. ``audit`` is that branch's audit table (row versions as
    applied, in order, with the time): the row it had at the failover is its last version
    there (none, or a delete: no row). A write is held when that row is its version or one
    written after it: a batch applies each row's last version only (an insert and a delete in
    one batch apply nothing), so an acknowledged version overwritten soon after may never
    have been a row there, and it is not lost. The leaf and the final rows are held to the
    root by :func:`writes` and :func:`replication`."""
    if lost_at is None or failed_over_at is None:
        return []
    db = _ro(audit)
    try:
        rows = db.execute(
            "SELECT id, n, op FROM items_applied WHERE id > 0 AND at < ? ORDER BY rowid",
            (failed_over_at,),
        ).fetchall()
    finally:
        db.close()
    had: dict[int, int | None] = {}  # the row's n at the failover; None: no row
    for id_, n, op in rows:
        had[id_] = None if op == "D" else n
    by_row: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for rec in sorted(
        (r for r in history if r["kind"] == "write" and r["state"] in ("ok", "unknown")),
        key=lambda r: r["t"],
    ):
        # Writes up to the failover were at the old root: any of them may have reached the
        # branch; those acknowledged before the loss must have.
        if rec["t"] < failed_over_at:
            by_row[rec["id"]].append(rec)
    missing: list[Write] = []
    for id_, recs in by_row.items():
        versions = [_key(rec)[2] for rec in recs]
        held_from = max((j for j, v in enumerate(versions) if v == had.get(id_)), default=-1)
        missing += [
            _key(rec)
            for j, rec in enumerate(recs)
            if j > held_from and rec["state"] == "ok" and rec["t"] < lost_at
        ]
    if not missing:
        return []
    return [
        f"sync mode: {len(missing)} acknowledged writes had not reached the branch that became"
        f" the root, e.g. {sorted(missing, key=str)[:5]}"
    ]


def never_both(audit: Path, stranded: Sequence[Write], failed_over_at: float | None) -> list[str]:
    """No saved stranded write was also applied by the set before the failover (replaying the
    saved file would then apply it twice): ``audit`` is the new root's audit table (the
    application writes there only after the failover)."""
    if not stranded or failed_over_at is None:
        return []
    db = _ro(audit)
    try:
        rows = db.execute(
            "SELECT id, n, op FROM items_applied WHERE at < ?", (failed_over_at,)
        ).fetchall()
    finally:
        db.close()
    applied = {(_OPS[op], i, None if op == "D" else n) for i, n, op in rows}
    both = sorted((w for w in stranded if w in applied), key=str)
    if not both:
        return []
    return [f"{len(both)} stranded writes saved and also applied by the set, e.g. {both[:5]}"]


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
        have = items(node)
        found = _diff(f"{node} vs {root}", want, have)
        behind = _root_as_of(run, root, have) if found else None
        if behind is not None:
            # Not a divergence but lag (a run that ended without settling): say so, with when.
            seq, at, total = behind
            found = [
                f"{node} vs {root}: behind, not diverged: {node} holds exactly {root}'s rows as "
                f"of its row version {seq} of {total} (at {at:.1f})"
            ]
        out += found
    return out


def _root_as_of(
    run: Path, root: str, have: dict[int, tuple[int, str]]
) -> tuple[int, float, int] | None:
    """The last point of the root's audited history (its ``items_applied``, every row version
    in commit order) at which its rows were exactly ``have``: (that version's number, its time,
    how many versions in all). None when the root keeps no audit or no point matches."""
    db = _ro(node_db(run, root))
    try:
        if not db.execute("SELECT 1 FROM sqlite_master WHERE name = 'items_applied'").fetchone():
            return None
        rows = db.execute("SELECT id, n, op, at FROM items_applied ORDER BY rowid").fetchall()
    finally:
        db.close()
    want = {i: n for i, (n, _) in have.items()}
    state: dict[int, int] = {}
    differ = set(want)  # the keys where the root's rows, so far, are not ``have``'s
    last = None
    for seq, (i, n, op, at) in enumerate(rows, start=1):
        if op == "D":
            state.pop(i, None)
        else:
            state[i] = n
        if state.get(i) == want.get(i):
            differ.discard(i)
        else:
            differ.add(i)
        if not differ:
            last = (seq, float(at or 0.0), len(rows))
    return last


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


#: The cascade's nodes; the first is the root until a root loss names another.
NODES = ("s1", "s2", "s3")
#: The nodes with the user's audit table (subscribers when the run started).
AUDITED = ("s2", "s3")
#: The file ``resurrect`` saves the old root's stranded events to, in the run's directory.
STRANDED_FILE = "stranded.jsonl"


def root_loss(history: list[dict[str, Any]]) -> tuple[str, float | None, float | None]:
    """The root at the end of the run; when the old one was lost (the application held) and
    when the failover was done (None, None: it never was)."""
    root, lost_at, failed_over_at = NODES[0], None, None
    for rec in sorted((r for r in history if r["kind"] == "root-loss"), key=_t):
        if rec["step"] == "lost":
            lost_at = rec["t"]
        elif rec["step"] == "failover":
            root, failed_over_at = rec["root"], rec["t"]
    return root, lost_at, failed_over_at


def root_losses(history: list[dict[str, Any]]) -> tuple[list[str], list[dict[str, Any]]]:
    """Each loss of the root's host, in order: how (``kind``: kill, freeze, isolate; ``by``: the
    nemesis's draw or the run's halfway guarantee), and the seconds from the fault to
    ``baton cascade root`` naming the new root. A loss the agents never failed over (or one
    the run ended in the middle of) is a violation."""
    out: list[str] = []
    losses: list[dict[str, Any]] = []
    for rec in sorted((r for r in history if r["kind"] == "root-loss"), key=_t):
        if rec["step"] == "start":
            losses.append(
                {
                    "root": rec["root"],
                    "host": rec.get("host"),
                    "kind": rec.get("how", "service-deleted"),
                    "by": rec.get("by", "halfway"),
                    "new_root": None,
                    "failover_seconds": None,
                }
            )
        elif rec["step"] == "lost" and losses:
            losses[-1]["failover_seconds"] = rec.get("seconds")
        elif rec["step"] == "failover" and losses:
            losses[-1]["new_root"] = rec["root"]
    for loss in losses:
        if loss["new_root"] is None:
            out.append(
                f"root {loss['root']} lost by {loss['kind']} of {loss['host']}: the agents "
                "never failed it over"
            )
    return out, losses


def check(run: Path) -> dict[str, Any]:
    """The report of the run in directory ``run`` (see the module docstring)."""
    history = load(run / "history")
    root, lost_at, failed_over_at = root_loss(history)
    subscribers = [n for n in NODES if n != root]
    stranded = stranded_events(run / STRANDED_FILE)
    violations: dict[str, list[str]] = {}
    violations["fencing"] = fencing(run / "fenced.db", history)
    sync = any(r["kind"] == "campaign-sync" for r in history)
    violations["writes"] = writes(node_db(run, root), history, stranded, lost_at, sync)
    if sync and root in AUDITED:
        audit = node_db(run, root)
        violations["writes"] += acknowledged_held(audit, history, lost_at, failed_over_at)
    if root in AUDITED:
        violations["writes"] += never_both(node_db(run, root), stranded, failed_over_at)
    violations["replication"] = replication(run, root, subscribers)
    violations["exactly_once"], applied = exactly_once(run, list(AUDITED))
    violations["leadership"] = leadership(history)
    violations["channels"], channel_stats = channels(history)
    violations["store_master"], store = store_master(history)
    violations["settling"], settle = settling(history)
    violations["root_loss"], losses = root_losses(history)
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
        # Sync mode: committed at the root but not confirmed on a branch in time.
        "writes_unconfirmed": sum(
            1 for r in history if r["kind"] == "write" and r["state"] == "unknown"
        ),
        "sync": next((r["k"] for r in history if r["kind"] == "campaign-sync"), 0),
        "root": root,
        "stranded_saved": len(stranded),
        "root_losses": losses,
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
