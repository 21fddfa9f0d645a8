"""SQL scripts run on every node through the queue (Londiste 3's ``execute``).

The root runs the script and adds a ``baton.execute`` event (data: the script's name, its
SHA-256 and its text) in the same transaction, with its capture triggers off for the script (so
the script's own row changes are not captured: every node runs the same script and makes them
itself) and then installed afresh (SQLite's triggers name the columns: a column added by the
script is then captured too). The script's name and hash are kept in ``baton_local``
(``execute.<name>``): the same script is never run twice on a node, and a re-run of the command
says it is done.

Each node that applies batches runs the script inside its apply transaction, at its place in
the batch: the batch's rows are written in segments cut at the script events (see
:func:`baton.cascade.queue_events.apply_rows`), so the row images from before the script (a
column still there, a column not added yet) are written before it and the later ones after it.
A script that fails on a node stops that node's apply at that batch (nothing of it is written:
one transaction), with one line naming the script and the error; the worker tries again, and
once the node is fixed (the missing object created) the batch goes through. A queue-only node
carries the event and runs nothing (it has no tables).
"""

from __future__ import annotations

import hashlib
import json
from contextlib import suppress
from dataclasses import dataclass

from baton.cascade import set_ops
from baton.cascade.queue_events import EXECUTE_EVENT, EXECUTED_KEY
from baton.errors import CascadeInputError, Refused

#: The longest script name kept (the file's name).
MAX_NAME = 200


@dataclass(frozen=True, slots=True)
class Executed:
    name: str
    sha256: str
    root: str
    #: The queue event that carries it (None when it had been run before).
    ev_id: int | None
    already: bool


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def check_script(name: str, text: str) -> None:
    """Refuse an empty script or a bad name before anything is opened."""
    if not name or len(name) > MAX_NAME or "/" in name or "\x00" in name:
        raise CascadeInputError(f"bad script name {name!r}: 1-{MAX_NAME} characters, no '/'")
    if not text.strip(" \t\r\n;"):
        raise CascadeInputError(f"{name}: the script is empty")


def execute(c: set_ops.CascadeSet, name: str, text: str) -> Executed:
    """Run the script ``text`` (named ``name``) at the live root and queue it for every node
    (see the module docstring). A script the root refuses raises :class:`CascadeInputError`:
    nothing is changed and nothing is queued."""
    check_script(name, text)
    sha = digest(text)
    root = set_ops.live_root(c)
    if root is None:
        raise Refused("no live root in the set: use failover")
    with c.db(root) as db:
        done = db.get_local(EXECUTED_KEY + name)
        if done == sha:
            return Executed(name, sha, root, None, True)
        if done is not None:
            raise Refused(
                f"a script named {name!r} with other content was run before: give the new "
                "script a name of its own"
            )
        if db.get_local("switch_tick") is not None:
            raise Refused(f"a switchover from {root} is under way: run the script afterwards")
        with db.transaction() as cur:
            tables = list(db.tables())
            for table in tables:
                with suppress(CascadeInputError):  # a table dropped since has no triggers
                    db.capture(cur, table, False)
            db.run_script(cur, text, CascadeInputError)
            for table in tables:
                with suppress(CascadeInputError):  # the script may drop a replicated table
                    db.capture(cur, table, True)
            data = json.dumps({"name": name, "sha256": sha, "sql": text})
            ev_id = db.insert_event(cur, EXECUTE_EVENT, None, None, data)
            db.set_local(cur, EXECUTED_KEY + name, sha)
    return Executed(name, sha, root, ev_id, False)


__all__ = ["Executed", "check_script", "digest", "execute"]
