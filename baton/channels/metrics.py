"""The channel metrics of one node (in the node's Prometheus registry)."""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from .stream import Stream


class ChannelMetrics:
    """Upstreams, subscribers, publications, forwarded subscribes, restarts and delivery
    latency of one node's channels."""

    def __init__(self, registry: CollectorRegistry) -> None:
        r = registry
        self.upstreams = Gauge(
            "baton_channel_upstreams", "Channel upstreams running on this node", registry=r
        )
        self.subscribers = Gauge(
            "baton_channel_subscribers",
            "Subscriptions served by this node (client: WebSocket clients; relay: other nodes)",
            ["kind"],
            registry=r,
        )
        self.publications = Counter(
            "baton_channel_publications_total",
            "Publications made by upstreams on this node",
            registry=r,
        )
        self.forwarded = Counter(
            "baton_channel_forwarded_subscribes_total",
            "Subscribes this node forwarded to a channel leader, by outcome",
            ["outcome"],
            registry=r,
        )
        self.restarts = Counter(
            "baton_channel_upstream_restarts_total",
            "Upstreams restarted after they failed",
            registry=r,
        )
        self.delivery = Histogram(
            "baton_channel_delivery_seconds",
            "From the upstream yielding a publication to this node writing it to a subscriber "
            "that was behind (the frame waited in the connection's queue)",
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5),
            registry=r,
        )
        self.fanout = Histogram(
            "baton_channel_fanout_seconds",
            "Per publication: from the upstream yielding it to this node having handed it to "
            "every subscriber's connection (written, or queued behind a subscriber that is behind)",
            buckets=(
                0.001, 0.0025, 0.005, 0.01, 0.02, 0.03, 0.04, 0.05, 0.075, 0.1, 0.15, 0.25,
                0.5, 1.0, 2.5,
            ),
            registry=r,
        )  # fmt: skip

    def count(self, streams: Iterable[Stream]) -> None:
        """Set the subscriber gauges from ``streams`` (subscribes still running not counted)."""
        clients = relays = 0
        for stream in streams:
            for sub in stream.subs.values():
                if sub.epoch == 0:
                    continue
                if sub.relay:
                    relays += 1
                else:
                    clients += 1
        self.subscribers.labels(kind="client").set(clients)
        self.subscribers.labels(kind="relay").set(relays)


__all__ = ["ChannelMetrics"]
