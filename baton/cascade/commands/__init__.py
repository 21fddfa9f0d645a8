"""The cascade operations as the ``baton cascade`` CLI and the node's HTTP API run them: a thin
adapter with one function per command. Each parses and normalises its arguments, opens the set,
calls one operation of :mod:`~baton.cascade.set_ops` or :mod:`~baton.cascade.node_ops` (where
the rules of the domain are) and returns its result as plain data. The verbs that call them
are declared once, in :mod:`baton.cascade.verbs`.

Each function checks its input before it writes anything and raises
:class:`~baton.errors.CascadeInputError` (a ConfigError) with one line when the input is bad (an
unknown node, a bad location, a table without a primary key, ...). When the input is well formed
but the set's state refuses the operation (a cycle, a dead provider, a node that is already
another one, a table still replicated below the root), it raises :class:`Refused`; a switchover
that did not finish within its timeout raises :class:`NotFinished`; a node database that cannot
be reached or fails raises :class:`~baton.errors.NodeDatabaseError` (its backend translated the
driver's error). :func:`classify` sorts any error into these kinds by its class alone, with its
message on one line and passwords removed, for the CLI's exit codes and the API's status codes.

Every operation is resumable: running it again after an interruption finishes the job, and
running it again after it finished changes nothing (the results say ``already``/``changed``).

This is synchronous code (node databases are): the API runs it in a thread. By concern:

- :mod:`~baton.cascade.commands.sets`: the set found through ``via``, and the kinds of error;
- :mod:`~baton.cascade.commands.create`: making nodes of every type;
- :mod:`~baton.cascade.commands.tables`: tables, sequences and scripts through the queue;
- :mod:`~baton.cascade.commands.operate`: events, providers, tags, pause;
- :mod:`~baton.cascade.commands.switch`: switchover, failover, resurrect, replacing a branch;
- :mod:`~baton.cascade.commands.status`: status, members, check, foreign keys and triggers;
- :mod:`~baton.cascade.commands.diff`: compare and repair a table, on Spark.
"""

from __future__ import annotations

from baton.cascade.commands.create import (
    NODE_TYPES,
    QUEUE_ONLY_ROLE,
    Created,
    NodeType,
    create_merge_leaf,
    create_node,
    create_root,
    create_subscriber,
)
from baton.cascade.commands.diff import compare, repair, resync
from baton.cascade.commands.operate import (
    QUEUE_ONLY_NOTE,
    Candidate,
    Emitted,
    Paused,
    ProviderChanged,
    Tagged,
    candidates,
    candidates_detail,
    change_provider,
    emit,
    parse_event_data,
    set_paused,
    tag,
)
from baton.cascade.commands.sets import (
    MAX_BEHIND,
    NAME_PATTERN,
    POLL,
    Kind,
    classify,
    existing,
    known,
    normalise,
    one_line,
    open_set,
)
from baton.cascade.commands.status import (
    SetStatus,
    check,
    fkeys,
    member_dict,
    members,
    root,
    status,
    triggers,
)
from baton.cascade.commands.switch import (
    AutoFailover,
    FailedOver,
    Resurrected,
    Switched,
    SyncSet,
    auto_failover,
    failover,
    replace_node,
    resurrect,
    switch_plan,
    switchover,
    sync,
)
from baton.cascade.commands.tables import (
    Missing,
    SeqAdded,
    SeqRemoved,
    TableAdded,
    TableRemoved,
    TableState,
    add_seq,
    add_table,
    execute,
    list_seqs,
    missing,
    read_script,
    remove_seq,
    remove_table,
    tables,
)
from baton.cascade.handover import SwitchPlan
from baton.cascade.table_diff import Compared, Repaired, Resynced
from baton.errors import NotFinished, Refused

__all__ = [
    "MAX_BEHIND",
    "NAME_PATTERN",
    "NODE_TYPES",
    "POLL",
    "QUEUE_ONLY_NOTE",
    "QUEUE_ONLY_ROLE",
    "AutoFailover",
    "Candidate",
    "Compared",
    "Created",
    "Emitted",
    "FailedOver",
    "Kind",
    "Missing",
    "NodeType",
    "NotFinished",
    "Paused",
    "ProviderChanged",
    "Refused",
    "Repaired",
    "Resurrected",
    "Resynced",
    "SeqAdded",
    "SeqRemoved",
    "SetStatus",
    "SwitchPlan",
    "Switched",
    "SyncSet",
    "TableAdded",
    "TableRemoved",
    "TableState",
    "Tagged",
    "add_seq",
    "add_table",
    "auto_failover",
    "candidates",
    "candidates_detail",
    "change_provider",
    "check",
    "classify",
    "compare",
    "create_merge_leaf",
    "create_node",
    "create_root",
    "create_subscriber",
    "emit",
    "execute",
    "existing",
    "failover",
    "fkeys",
    "known",
    "list_seqs",
    "member_dict",
    "members",
    "missing",
    "normalise",
    "one_line",
    "open_set",
    "parse_event_data",
    "read_script",
    "remove_seq",
    "remove_table",
    "repair",
    "replace_node",
    "resurrect",
    "resync",
    "root",
    "set_paused",
    "status",
    "switch_plan",
    "switchover",
    "sync",
    "tables",
    "tag",
    "triggers",
]
