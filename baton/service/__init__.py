"""A cascade node's service: its ticker when it is the root, its Spark worker otherwise.

- :mod:`baton.service.node`: :class:`~baton.service.node.NodeService`, the one step loop with
  the one error policy, followed by every runner of a node;
- :mod:`baton.service.under_lease`: ``baton cascade run``, a node's service under a fenced
  lease in the coordination store;
- :mod:`baton.service.workload`: the ``cascade-worker`` workload type, a node's service placed
  by the controller;
- :mod:`baton.service.auto_failover`: automatic set failover's actor, elected among the node
  agents, what it observes (:mod:`baton.service.auto_view`) and the members' reports of
  whether they reach their set's root (:mod:`baton.service.reach`).

This layer sits above the queue (:mod:`baton.cascade`) and Spark (:mod:`baton.spark`).
"""
