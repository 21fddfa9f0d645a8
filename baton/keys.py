"""The coordination store's keyspace: every lease name, record key and epoch counter that baton
itself uses, in one place.

Leases::

    controller               the placement controller role (every node agent campaigns)
    members/<node>           a node agent's membership: live while held
    cascade/<set>/<node>     leadership of a cascade node's service (``baton cascade run``)
    auto-failover            the actor of automatic set failover (every node agent campaigns)

Records::

    nodes/<node>             what a node publishes about itself (address, capacity, labels,
                             types); written under its membership lease, so it goes with it
    objects/<name>           a placed object (type, partitions, replicas, spec, selector)
    groups/<name>/<p>        the control group of partition ``p``: written only by the
                             controller, each write conditioned on its lease and epoch
    drain/<node>             a drain request for ``node``
    reach/<set>/<node>       whether cascade node ``node``'s host reaches its set's root (the
                             false-positive guard of automatic failover), with the store time
    auto-failover/<set>      the last automatic failover of ``set``, written under the actor's
                             lease (its epoch, the decision)

Epoch counters (:meth:`~baton.store.Store.next_epochs`)::

    groups/<name>/<p>        the terms of that control group; outlives the group record

Every other name belongs to users (``baton elect NAME``, :class:`~baton.lease.election.Election`,
:class:`~baton.lease.keeper.LeaseKeeper`), so a name of their own should not start with one of these
prefixes. The strings never change: stores written by earlier versions must keep working.
"""

from __future__ import annotations

CONTROLLER = "controller"
MEMBERS = "members/"
NODES = "nodes/"
OBJECTS = "objects/"
GROUPS = "groups/"
DRAIN = "drain/"
CASCADE = "cascade/"
AUTO_FAILOVER = "auto-failover"
REACH = "reach/"


def member(node: str) -> str:
    """The membership lease of ``node``."""
    return MEMBERS + node


def node_record(node: str) -> str:
    """The record ``node`` publishes about itself."""
    return NODES + node


def object_record(name: str) -> str:
    """The record of object ``name``."""
    return OBJECTS + name


def group_record(group: str) -> str:
    """The record of control group ``group`` (``<object>/<partition>``)."""
    return GROUPS + group


def group_terms(group: str) -> str:
    """The epoch counter the terms of ``group`` come from (it outlives the group record, so an
    object deleted and created again continues above every term its groups ever had)."""
    return GROUPS + group


def drain_record(node: str) -> str:
    """The drain request of ``node``."""
    return DRAIN + node


def cascade_lease(set_name: str, node: str) -> str:
    """The lease whose holder runs the service of cascade node ``node`` of set ``set_name``."""
    return f"{CASCADE}{set_name}/{node}"


def reach_record(set_name: str, node: str) -> str:
    """Whether cascade node ``node`` of ``set_name`` reaches the set's root, as its host said."""
    return f"{REACH}{set_name}/{node}"


def auto_failover_record(set_name: str) -> str:
    """The last automatic failover of ``set_name``."""
    return f"{AUTO_FAILOVER}/{set_name}"
