"""Combining partition sets (seed 004's complex case): merge-leaves, the combined root and the
combined failover.

Several partition sets (A, B, C, D: each a root with its writers) feed one **combined set**.
Each node of the combined set that takes part hosts, in its own database, one **merge-leaf**
per partition set: a leaf of that partition set, with no queue of its own, whose node tables
live in a namespace of the host database (its location is ``HOST_LOCATION#SET``). What a
merge-leaf does follows from its host's role in the combined set, as the seed's node behaviour
table says:

- host is the combined set's **root** (the *combined-root*): the merge-leaf reads its partition's
  batches, writes their rows into the host's tables (initial copies without emptying them:
  several partitions fill one table) and, in the same transaction, queues the partition's
  events into the combined set's queue with a ``baton.partition-tick`` event carrying the
  partition tick (:func:`baton.cascade.apply.merge_events`); its position is its watermark
  upwards, as any leaf's.
- host is a **branch** of the combined set (the *combined-failover*): the merge-leaf only
  tracks. Its position is the partition tick the combined set holds, moved as the host applies
  the combined set's batches (each ``baton.partition-tick`` it meets), so it always lags behind
  what the combined root has merged, and holds its partition's queue down to there. On a
  failover of the combined root it becomes the merging one, from exactly the tick where the
  combined set's copy of its partition ends.
"""

from __future__ import annotations

from baton.cascade import node_ops
from baton.cascade.db import open_node_db
from baton.cascade.db.base import MERGE_KEY, split_location
from baton.cascade.model import NodeState, Role
from baton.errors import CascadeInputError, Refused


def merge_location(host_location: str, part_set: str) -> str:
    """The location of the merge-leaf of ``part_set`` hosted at ``host_location``."""
    return f"{host_location}#{part_set}"


def create_merge_leaf(name: str, host: str, provider: str, via: str) -> NodeState:
    """Add merge-leaf ``name`` to the partition set of ``provider`` (found through ``via``, any
    member of that set), hosted in the combined set's node at ``host`` (a location); the new
    node's state. Refused, before anything is written, when ``host`` is not a node that carries
    the combined set's queue (a leaf has none to fill), belongs to the partition set itself, or
    already hosts another merge-leaf for that set. Resumable."""
    node_ops.check_name(name)
    _, part = split_location(host)
    if part is not None:
        raise CascadeInputError(f"{host}: give the combined set's node location without #SET")
    with open_node_db(host) as hdb:
        hst = hdb.state()
        if not hst.role.carries_queue:
            raise Refused(
                f"{hst.name} is a leaf of set {hst.set_name}: it has no queue to combine into "
                "(a merge-leaf needs the combined set's root or a branch)"
            )
        hosted = hdb.merge_leaves()
    with open_node_db(via) as vdb:
        part_set = vdb.state().set_name
    if part_set == hst.set_name:
        raise Refused(f"{hst.name} is in set {part_set} itself: a set cannot merge into itself")
    if part_set in hosted and hosted[part_set] != name:
        raise Refused(f"{hst.name} already hosts merge-leaf {hosted[part_set]} for set {part_set}")
    location = merge_location(host, part_set)
    st = node_ops.create_subscriber(Role.LEAF, name, location, provider, via)
    with open_node_db(location) as db, db.transaction() as cur:
        db.set_local(cur, "combined", hst.set_name)
        db.host_set(cur, MERGE_KEY + part_set, name)
        start = db.merged().get(part_set)
        if hst.role is not Role.ROOT and start is not None:
            # Tracking: the position is what the combined set holds of the partition, not the
            # provider's last tick (that may be ahead of it).
            db.set_local(cur, "position", str(min(st.position, start)))
        elif hst.role is not Role.ROOT:
            # Not known yet (no partition tick seen here): the first one sets it. Until then
            # its tables are to be copied whole should it have to merge (a failover first).
            db.set_local(cur, "tracking", "unknown")
        st = db.state()
    if hst.role is not Role.ROOT:
        # The provider holds its queue for the node from there on (its own entry, written
        # when the node was created, said the provider's last tick).
        with node_ops.provider_db(provider, via) as prov, prov.transaction() as cur:
            prov.set_watermark(cur, name, st.position)
    return st


__all__ = ["create_merge_leaf", "merge_location"]
