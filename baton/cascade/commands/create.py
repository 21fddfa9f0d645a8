"""Making nodes: a root, a branch or leaf, a queue-only branch, a merge-leaf, and
``create-node`` that takes any of them by its type."""

from __future__ import annotations

import dataclasses
from enum import StrEnum

from baton.cascade import node_ops, set_ops
from baton.cascade.commands.sets import existing, known, normalise, open_set
from baton.cascade.model import Role
from baton.errors import CascadeInputError, redact_url

# -- creating nodes ------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class Created:
    name: str
    role: str
    provider: str | None
    set_name: str
    #: The stored location (an SQLite path made absolute), password shown as ``***``.
    location: str
    #: The tick it starts from (for a root, 0).
    position: int
    already: bool


def create_root(name: str, location: str, set_name: str) -> Created:
    """Make the database at ``location`` the root ``name`` of a new set ``set_name``."""
    node_ops.check_name(name)
    node_ops.check_name(set_name)  # both before the database is opened (which may create a file)
    location = normalise(location)
    before = node_ops.installed(location)
    with set_ops.refusing():
        node_ops.create_root(name, location, set_name)
    return Created(name, Role.ROOT.value, None, set_name, redact_url(location), 0,
                   before is not None)  # fmt: skip


def create_subscriber(
    role: Role, name: str, location: str, provider: str, via: str, *, queue_only: bool = False
) -> Created:
    """Add the branch or leaf ``name`` at ``location``, receiving from ``provider``;
    ``queue_only``: a branch that keeps the queue and replicates no tables."""
    node_ops.check_name(name)
    if role is Role.ROOT:
        raise CascadeInputError("use create-root for a root")
    if queue_only and role is not Role.BRANCH:
        raise CascadeInputError("only a branch can be queue-only (a leaf has no queue)")
    c = open_set(via)
    known(c, provider)
    location = normalise(location)
    before = node_ops.installed(location)
    with set_ops.refusing():
        st = node_ops.create_subscriber(
            role, name, location, provider, c.via, queue_only=queue_only
        )
    shown = QUEUE_ONLY_ROLE if queue_only else role.value
    return Created(name, shown, provider, st.set_name, redact_url(location), st.position,
                   before is not None)  # fmt: skip


#: How a queue-only branch's role is shown (``Created.role``, ``create-node``'s TYPE).
QUEUE_ONLY_ROLE = "queue-only"


class NodeType(StrEnum):
    """The node types of :func:`create_node` (``create-node``'s TYPE)."""

    ROOT = "root"
    BRANCH = "branch"
    LEAF = "leaf"
    QUEUE_ONLY = QUEUE_ONLY_ROLE
    MERGE_LEAF = "merge-leaf"


#: The node types of :func:`create_node`, as the CLI lists them.
NODE_TYPES = tuple(t.value for t in NodeType)


def create_node(
    type_: str,
    name: str,
    location: str,
    *,
    provider: str | None = None,
    set_name: str | None = None,
    via: str | None = None,
    host: str | None = None,
) -> Created:
    """Seed 004's ``create-node TYPE NAME LOCATION``: one verb for every kind of node.
    ``root`` needs ``set_name``; ``branch``, ``leaf`` and ``queue-only`` need ``provider`` and
    ``via``; ``merge-leaf`` needs ``provider`` and ``via`` (any member of the partition set),
    and LOCATION (or ``host``, the same) is the combined set's node that hosts it."""
    if type_ not in NODE_TYPES:
        raise CascadeInputError(f"bad node type {type_!r}: use one of {', '.join(NODE_TYPES)}")
    kind = NodeType(type_)
    if kind is NodeType.ROOT:
        if set_name is None:
            raise CascadeInputError("a root needs --set SET (the new set's name)")
        if provider is not None or host is not None:
            raise CascadeInputError("a root has no provider and no host")
        return create_root(name, location, set_name)
    if provider is None or via is None:
        raise CascadeInputError(f"a {type_} needs a provider (--provider NODE) and --via")
    if set_name is not None:
        raise CascadeInputError(f"a {type_} joins the set of its provider: leave out --set")
    if kind is NodeType.MERGE_LEAF:
        host = normalise(host or location)
        if host != normalise(location):
            raise CascadeInputError(
                "a merge-leaf lives in the combined set's node: give its location as LOCATION "
                "(--host, if given, must be the same)"
            )
        return create_merge_leaf(name, host, provider, via)
    if host is not None:
        raise CascadeInputError(f"a {type_} has no host: --host is for a merge-leaf")
    role = Role.LEAF if kind is NodeType.LEAF else Role.BRANCH
    return create_subscriber(
        role, name, location, provider, via, queue_only=kind is NodeType.QUEUE_ONLY
    )


def create_merge_leaf(name: str, host: str, provider: str, via: str) -> Created:
    """Add the merge-leaf ``name`` of ``provider``'s (partition) set, hosted in the combined
    set's node at ``host`` (see :mod:`baton.cascade.merge`)."""
    from baton.cascade import merge  # the combined sets' module: only when one is made

    node_ops.check_name(name)
    c = open_set(via)
    known(c, provider)
    host = existing(host)
    location = merge.merge_location(host, c.set_name)
    before = node_ops.installed(location)
    with set_ops.refusing():
        st = merge.create_merge_leaf(name, host, provider, c.via)
    return Created(name, "merge-leaf", provider, st.set_name, redact_url(location), st.position,
                   before is not None)  # fmt: skip
