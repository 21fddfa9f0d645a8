"""Queue events that are not row changes but still act on every node that applies a batch:
sequence values (``baton.seq``, see :mod:`baton.cascade.seqs`) and SQL scripts run through the
queue (``baton.execute``, see :mod:`baton.cascade.ddl`). Both act inside the apply transaction
of :func:`baton.cascade.apply.apply_batch`: :func:`apply_rows` writes the batch's rows in
segments cut at its scripts, each script run at its place, and :func:`apply_special` raises the
node's sequences after the rows. The root's side, :func:`send_values`, runs in its ticker.

This module knows node databases and events only (the apply step imports it); the commands
that register sequences and queue scripts are in :mod:`~baton.cascade.seqs` and
:mod:`~baton.cascade.ddl`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from contextlib import suppress
from typing import Any

from baton.cascade.db import NodeDB
from baton.cascade.model import Event, NodeState, Role
from baton.errors import CascadeInputError, NodeDatabaseError, NodeUnreachable

#: The ``baton_local`` key of a queue-only branch ("1"): it keeps the queue (it can provide
#: others' queues) and replicates no tables, so it can give no one an initial table copy.
QUEUE_ONLY = "queue_only"
#: The event that carries the root's sequence values: ``{"seqs": {name: last value}}``.
SEQ_EVENT = "baton.seq"
#: ``baton_local`` key prefix of a sequence the node keeps (value "1").
SEQ_KEY = "seq."
#: Root: the values it last sent (JSON), so unchanged values are not sent again.
SENT_KEY = "seq_sent"
#: The event that carries a script: ``{"name", "sha256", "sql"}``.
EXECUTE_EVENT = "baton.execute"
#: ``baton_local`` key prefix: ``execute.<name>`` = the SHA-256 of the script run here.
EXECUTED_KEY = "execute."


def registered(db: NodeDB) -> list[str]:
    """The sequences the node of ``db`` keeps."""
    return sorted(db.locals_with_prefix(SEQ_KEY))


# -- sequences -------------------------------------------------------------------------------


def send_values(db: NodeDB, still_root: Callable[[NodeDB], bool]) -> int | None:
    """Root, when a tick is due: add a ``baton.seq`` event with the last values of the
    sequences it keeps if they changed since the last one, in a transaction of its own before
    the tick's (a PostgreSQL tick is made in a transaction that wrote no event), so at most one
    per tick. ``still_root(db)`` is checked under the write lock. The event's id, or None."""
    if not db.has_sequences():
        return None
    names = registered(db)
    if not names:
        return None
    values: dict[str, int] = {}
    for seq in names:
        with suppress(CascadeInputError):  # dropped since: nothing to send for it
            value = db.sequence_last(seq)
            if value is not None:
                values[seq] = value
    if not values or values == json.loads(db.get_local(SENT_KEY) or "null"):
        return None
    with db.transaction() as cur:
        if not still_root(db):
            return None
        ev_id = db.insert_event(cur, SEQ_EVENT, None, None, json.dumps({"seqs": values}))
        db.set_local(cur, SENT_KEY, json.dumps(values))
    return ev_id


def apply_special(db: NodeDB, cur: Any, st: NodeState, events: Sequence[Event]) -> None:
    """Raise the node's sequences to the values of the batch's ``baton.seq`` events (never
    lower them), in the caller's transaction. A sequence the node keeps but lacks stops the
    apply at this batch until it is created again (or removed with remove-seq)."""
    sent = [e for e in events if e.type == SEQ_EVENT and e.data]
    if not sent or st.role is Role.ROOT or not db.has_sequences():
        return
    mine = set(registered(db))
    for e in sent:
        for seq, value in json.loads(e.data or "{}").get("seqs", {}).items():
            if seq not in mine:
                continue
            try:
                db.raise_sequence(cur, seq, int(value))
            except CascadeInputError as exc:
                raise NodeDatabaseError(
                    f"{st.name}: cannot keep sequence {seq!r} (event {e.ev_id}): {exc}; create "
                    "it or run remove-seq, and the worker applies the batch again"
                ) from None


# -- scripts ---------------------------------------------------------------------------------


def run_script_here(db: NodeDB, cur: Any, st: NodeState, e: Event) -> None:
    """Run the script of event ``e`` on the node ``st`` in the apply transaction, unless it
    was run here before (same name and hash) or the node is queue-only (it has no tables)."""
    if st.role is Role.ROOT or db.get_local(QUEUE_ONLY) == "1":
        return
    data = json.loads(e.data or "{}")
    name, sha, text = str(data["name"]), str(data["sha256"]), str(data["sql"])
    if db.get_local(EXECUTED_KEY + name) == sha:
        return
    try:
        db.run_script(cur, text, NodeDatabaseError)
    except NodeUnreachable:
        raise
    except NodeDatabaseError as exc:
        raise NodeDatabaseError(
            f"{st.name}: script {name} (event {e.ev_id}, tick {e.tick}) failed, nothing of the "
            f"batch was applied: {exc}; fix the node (create what is missing) and its worker "
            "applies the batch again"
        ) from exc
    db.set_local(cur, EXECUTED_KEY + name, sha)


def apply_rows(
    db: NodeDB,
    cur: Any,
    st: NodeState,
    reduced: Iterable[Event],
    events: Sequence[Event],
    *,
    write: Callable[[list[Event]], int],
) -> int:
    """Write the batch's reduced row events with ``write`` (which writes a list of them and
    returns the number of rows), cut at the batch's scripts: the rows before a script, the
    script, the rows after it. A key's last event falls in exactly one segment, so every key
    ends as the batch leaves it, and a row image is always written to the table as it was when
    the image was taken (a column added by a later script is not there yet, one dropped by it
    still is). The rows written."""
    scripts = sorted((e for e in events if e.type == EXECUTE_EVENT), key=lambda e: e.ev_id)
    if not scripts:
        return write(list(reduced))
    ordered = sorted(reduced, key=lambda e: e.ev_id)
    rows, i = 0, 0
    for script in scripts:
        j = i
        while j < len(ordered) and ordered[j].ev_id < script.ev_id:
            j += 1
        rows += write(ordered[i:j])
        run_script_here(db, cur, st, script)
        i = j
    return rows + write(ordered[i:])


__all__ = [
    "EXECUTED_KEY",
    "EXECUTE_EVENT",
    "QUEUE_ONLY",
    "SENT_KEY",
    "SEQ_EVENT",
    "SEQ_KEY",
    "apply_rows",
    "apply_special",
    "registered",
    "run_script_here",
    "send_values",
]
