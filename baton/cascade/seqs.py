"""Sequences kept in step across the set (Londiste's ``add-seq``): every node's registered
sequence stays at least as high as the root's, so a node that becomes the root never hands out
a value the set has already used.

A node registers a sequence in its ``baton_local`` (``seq.<name>``). When a tick is due, the
root's ticker reads its registered sequences' last values and, when any changed since it last
sent them (``seq_sent``), adds one ``baton.seq`` event (data ``{"seqs": {name: value}}``) just
before the tick: at most one per tick. Each node that applies the batch raises its registered
sequences to those values (``setval(seq, GREATEST(current, value))``) in the apply transaction
(:func:`baton.cascade.queue_events.apply_special`; the root's side is
:func:`~baton.cascade.queue_events.send_values`); a branch carries the event in its queue as
any other. Only PostgreSQL has sequences: on SQLite the commands refuse and nothing is changed.
"""

from __future__ import annotations

from contextlib import suppress

from baton.cascade import node_ops, set_ops
from baton.cascade.db import NodeDB, ident
from baton.cascade.model import Role
from baton.cascade.queue_events import SENT_KEY, SEQ_KEY, registered
from baton.errors import CascadeInputError, Refused


def check_seq(db: NodeDB, node: str, seq: str) -> None:
    """Refuse (bad input) a sequence name that is not plain, a node without sequences
    (SQLite), or a sequence missing on ``node``."""
    try:
        ident(seq)
    except CascadeInputError:
        raise CascadeInputError(f"bad sequence name {seq!r}: use letters, digits and '_'") from None
    if not db.has_sequences():
        raise CascadeInputError(
            f"{node}: SQLite has no sequences: add-seq needs PostgreSQL nodes (nothing changed)"
        )
    try:
        db.sequence_last(seq)
    except CascadeInputError:
        raise CascadeInputError(
            f"{node}: no sequence {seq!r}: create it there first (nothing changed)"
        ) from None


def add_seq(c: set_ops.CascadeSet, seq: str, node: str | None) -> list[tuple[str, bool]]:
    """Register ``seq`` on ``node``, or (None) on every live node that replicates tables (the
    root first): (node, already registered) for each. Every node is checked before any is
    written; a node other than the root needs the root to have it (it sends the values)."""
    states = set_ops.live_states(c)
    if node is not None:
        c.location(node)
        names = [node]
    else:
        held = set_ops.without_tables(c, states)
        names = [n for n in set_ops.subscription_order(states) if n not in held]
    root = set_ops.live_root(c)
    for name in names:
        with c.db(name) as db:
            if node_ops.is_queue_only(db):
                raise Refused(f"{name} is queue-only: it keeps only the queue, no sequences")
            check_seq(db, name, seq)
    if root is not None and root not in names:
        with c.db(root) as rdb:
            if seq not in registered(rdb):
                raise Refused(
                    f"the root {root} does not send sequence {seq!r}: add it there first "
                    "(or use --all)"
                )
    out: list[tuple[str, bool]] = []
    for name in names:
        with c.db(name) as db:
            already = seq in registered(db)
            if not already:
                with db.transaction() as cur:
                    db.set_local(cur, SEQ_KEY + seq, "1")
            out.append((name, already))
    if root is not None and not all(already for _, already in out):
        with c.db(root) as rdb, rdb.transaction() as cur:
            rdb.set_local(cur, SENT_KEY, None)  # the next tick sends every value again
    return out


def remove_seq(c: set_ops.CascadeSet, seq: str, node: str) -> bool:
    """Stop keeping ``seq`` on ``node`` (the sequence stays); False when it was not
    registered. At the root it is refused while another live node keeps it (the root sends the
    values)."""
    with c.db(node) as db:
        if seq not in registered(db):
            check_seq(db, node, seq)  # a typo is an error, not a finished job
            return False
        if db.state().role is Role.ROOT:
            others = []
            for name in sorted(c.nodes):
                if name == node or c.dead(name):
                    continue
                with c.db(name) as odb:
                    if seq in registered(odb):
                        others.append(name)
            if others:
                raise Refused(
                    f"{seq} is still kept by {', '.join(others)}: remove it there first "
                    "(the root sends its values)"
                )
        with db.transaction() as cur:
            db.set_local(cur, SEQ_KEY + seq, None)
    return True


def seqs(c: set_ops.CascadeSet, node: str) -> dict[str, int | None]:
    """The sequences ``node`` keeps and their last values there (None: never used; also
    when the sequence was dropped since)."""
    with c.db(node) as db:
        out: dict[str, int | None] = {}
        for seq in registered(db):
            value = None
            with suppress(CascadeInputError):
                value = db.sequence_last(seq)
            out[seq] = value
        return out


__all__ = ["add_seq", "check_seq", "remove_seq", "seqs"]
