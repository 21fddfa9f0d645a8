"""The cascade's queue domain (seed 004): node databases, events, ticks and batches, the apply
step, and the operations on nodes and sets. No Spark and no elections here: the Spark pipeline
is :mod:`baton.spark`, and running a node (ticker or worker, under a lease or as a placed
object) is :mod:`baton.service`.

- :mod:`~baton.cascade.model`: events, ticks, roles, a node's state;
- :mod:`~baton.cascade.codec`: row images as JSON, bit for bit;
- :mod:`~baton.cascade.db`: node databases (SQLite, PostgreSQL) and :func:`open_node_db`;
- :mod:`~baton.cascade.ticker`: ticks and the global watermark at the root;
- :mod:`~baton.cascade.watermark`: providers pulling their subscribers' watermarks;
- :mod:`~baton.cascade.apply`: one micro-batch applied in one fenced transaction, and the one
  rule for a key's last event (:func:`~baton.cascade.batches.reduce_events`);
- :mod:`~baton.cascade.compare`: a table's row count and checksum, the tick a node reflects;
- :mod:`~baton.cascade.node_ops`: operations on one node (the name, event-type and table-shape
  rules; create, add a table, copy, emit);
- :mod:`~baton.cascade.set_ops`: operations on a set (:class:`CascadeSet`: add-table on one
  node or all, remove-table, missing, emit at the root, providers, tags, pause, members and
  status, check, switchover, failover, resurrect);
- :mod:`~baton.cascade.root`: where writers write (the set's current root, found through its
  members), and :mod:`~baton.cascade.writer`: a connection to it and a writer that follows it
  after a switchover or failover;
- :mod:`~baton.cascade.auto_failover`: automatic failover's decision, a pure function (its
  actor is :mod:`baton.service.auto_failover`), and :mod:`~baton.cascade.auto_switch`: the
  per-set switch, kept in the members' databases, and the actor's epoch fence;
- :mod:`~baton.cascade.commands`: the thin adapter the CLI and the node API share (arguments
  in, one operation, results and kinds of error out);
- :mod:`~baton.cascade.verbs`: every verb declared once (:mod:`~baton.cascade.verb`: what a
  verb is; its arguments in :mod:`~baton.cascade.verb_args`, what a person reads of it in
  :mod:`~baton.cascade.verb_shown`), from which the commands and the routes are generated.
"""
