"""Prometheus metrics of one node agent (its own registry, so tests can run several agents in
one process).

Every series ``/metrics`` renders carries ``node`` (this agent's id): the series of the services
the agent runs (channels, store failover, the controller, the cascade members) are labelled at
render time by :class:`_NodeLabelled`, so none of them needs to know the node. A series that
already has a ``node`` label (``baton_placement_members``: the node members are placed on) keeps
it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from baton.lease.election import (
    Election,
    ElectionEvent,
    LeadershipLost,
    NewLeader,
    NewState,
    State,
)


class _Included(Collector):
    """Another registry's series, exported as part of this one (a service with a registry of
    its own, such as the store-failover server)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.included = registry

    def collect(self) -> Iterable[Metric]:
        return self.included.collect()


class _NodeLabelled(Collector):
    """``registry``'s series with ``node`` added to every sample that has none."""

    def __init__(self, registry: CollectorRegistry, node_id: str) -> None:
        self.registry = registry
        self.node_id = node_id

    def collect(self) -> Iterable[Metric]:
        for family in self.registry.collect():
            out = Metric(family.name, family.documentation, family.type, family.unit)
            for sample in family.samples:
                if "node" in sample.labels:
                    out.samples.append(sample)
                else:
                    labels = {"node": self.node_id, **sample.labels}
                    out.samples.append(sample._replace(labels=labels))
            yield out


class NodeMetrics:
    """The metrics a node exposes on ``/metrics``."""

    def __init__(self, node_id: str) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.leaderships = Counter(
            "baton_leaderships_total", "Times this node became leader", ["election"], registry=r
        )
        self.losses = Counter(
            "baton_leadership_lost_total",
            "Times this node stopped leading, by reason",
            ["election", "reason"],
            registry=r,
        )
        self.is_leader = Gauge(
            "baton_is_leader",
            "Deprecated alias of baton_node_member and baton_controller_leader (one release)",
            ["election"],
            registry=r,
        )
        self.member = Gauge(
            "baton_node_member", "1 while this node holds its cluster membership", registry=r
        )
        self.controller_leader = Gauge(
            "baton_controller_leader", "1 while this node is the controller", registry=r
        )
        self.epoch = Gauge(
            "baton_leader_epoch",
            "Epoch of the election's current leader as this node last saw it (0: none)",
            ["election"],
            registry=r,
        )
        self.leader_changes = Counter(
            "baton_leader_changes_total",
            "Changes of the election's leader seen by this node (any node's)",
            ["election"],
            registry=r,
        )
        self.renewal = Histogram(
            "baton_lease_renewal_seconds",
            "Latency of successful lease renewals",
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5),
            registry=r,
        )
        self.store_errors = Counter(
            "baton_store_errors_total", "Failed store calls", ["operation"], registry=r
        )
        self.requests = Counter(
            "baton_http_requests_total", "API requests", ["method", "route", "status"], registry=r
        )
        self.objects = Gauge(
            "baton_placement_members",
            "Group members placed per node and object type (as the controller last decided)",
            ["node", "type"],
            registry=r,
        )
        self.moves = Counter(
            "baton_placement_moves_total", "Group members added to a node by placement", registry=r
        )
        self.reconcile_seconds = Histogram(
            "baton_reconcile_seconds",
            "Duration of one placement reconciliation pass",
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0),
            registry=r,
        )
        self.suspects = Gauge(
            "baton_suspect_nodes",
            "Known nodes without membership or unreachable from the controller",
            registry=r,
        )
        self.leader_transfers = Counter(
            "baton_leader_transfers_total",
            "Group leader changes decided by the controller",
            registry=r,
        )
        self.failure_groups = Gauge(
            "baton_groups_in_failure_reconciliation",
            "Groups whose suspect leader may not be deposed yet (members still stream from it)",
            registry=r,
        )
        self.error_groups = Gauge(
            "baton_groups_in_error",
            "Groups with a member whose workload cannot be created or take its role (state error)",
            registry=r,
        )
        self.info = Gauge("baton_node_info", "Node identity", ["node"], registry=r)
        self.info.labels(node=node_id).set(1)
        self._rendered = CollectorRegistry(auto_describe=False)
        self._rendered.register(_NodeLabelled(r, node_id))

    def watch(self, election: Election, label: str) -> None:
        """Count ``election``'s events and renewals under ``label``."""

        # The node's two elections have gauges of their own names (``baton_is_leader{election}``
        # stays one release as their alias: membership is not leadership).
        own = {"membership": self.member, "controller": self.controller_leader}.get(label)

        def on_event(event: ElectionEvent) -> None:
            if isinstance(event, NewState):
                leading = event.state is State.LEADER
                self.is_leader.labels(election=label).set(1 if leading else 0)
                if own is not None:
                    own.set(1 if leading else 0)
                if leading:
                    self.leaderships.labels(election=label).inc()
            elif isinstance(event, NewLeader):
                self.epoch.labels(election=label).set(event.epoch or 0)
                if event.leader is not None:
                    self.leader_changes.labels(election=label).inc()
            elif isinstance(event, LeadershipLost):
                self.losses.labels(election=label, reason=event.reason.value).inc()

        election.on_event(on_event)
        election.renewal_observer = self.renewal.observe
        election.error_observer = lambda op: self.store_errors.labels(operation=op).inc()
        self.is_leader.labels(election=label).set(0)
        self.epoch.labels(election=label).set(0)
        if own is not None:
            own.set(0)

    def set_placement(self, per: Mapping[tuple[str, str], int]) -> None:
        """Replace the per node and type member counts (series that went to zero disappear)."""
        self.objects.clear()
        for (node, type_), count in per.items():
            self.objects.labels(node=node, type=type_).set(count)

    def add(self, collector: Collector) -> None:
        """Export ``collector``'s series too (labelled with ``node`` like the rest)."""
        self.registry.register(collector)

    def include(self, registry: CollectorRegistry) -> None:
        """Export ``registry``'s series too, labelled with ``node`` like the rest."""
        self.registry.register(_Included(registry))

    def render(self) -> bytes:
        return generate_latest(self._rendered)
