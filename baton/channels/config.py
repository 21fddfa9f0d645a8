"""Channel settings of a node (the ``[channels]`` table of its configuration) and the channel
timings, validated together with the node's lease timings by the seed's rule: the lease
expiry is several refresh intervals (the lease timings check that) and several forwarding
timeouts, and a follower looks at the lease often enough to see a change well inside a ttl.

::

    [channels]
    linger = 2.0              # seconds an upstream outlives its last subscriber
    forward_timeout = 1.0     # one forwarded subscribe or relay connection attempt
                              # (default: ttl/4 up to 1 s)
    check_interval = 1.0      # how often followers check each channel's lease (default:
                              # the renew interval)
    history = 1000            # publications the leader keeps for recovery, per channel
    queue = 10000             # frames queued per connection before it is closed as too slow
    max_frame = 65536         # largest client frame in bytes
    handlers = { prices = "mypkg.prices:PriceHandler" }

    [channels.settings.cascade.nodes]
    s1 = "sqlite:///data/s1.db"

Environment: ``BATON_CHANNELS`` holds the same table as JSON.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from baton.errors import ConfigError
from baton.lease.timings import Timings
from baton.validation import Int, Seconds

from .protocol import MAX_FRAME


class ChannelsConfig(BaseModel):
    """The ``[channels]`` table of a node's configuration."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    linger: Seconds = Field(default=2.0, ge=0, le=3600)
    forward_timeout: Seconds | None = Field(default=None, gt=0, le=60)
    check_interval: Seconds | None = Field(default=None, gt=0, le=60)
    history: Int = Field(default=1000, ge=1, le=1_000_000)
    queue: Int = Field(default=10_000, ge=10, le=10_000_000)
    max_frame: Int = Field(default=MAX_FRAME, ge=256, le=16 * 1024 * 1024)
    #: Extra handlers: namespace -> "package.module:Class".
    handlers: dict[str, str] = Field(default_factory=dict)
    #: Per-namespace settings handed to handlers (``Context.settings``).
    settings: dict[str, dict[str, Any]] = Field(default_factory=dict)

    def timings(self, lease: Timings) -> ChannelTimings:
        return ChannelTimings(
            lease,
            forward_timeout=self.forward_timeout
            or max(lease.request_timeout, min(1.0, lease.ttl / 4)),
            check_interval=self.check_interval or lease.renew_interval,
            linger=self.linger,
        )


@dataclass(frozen=True, slots=True)
class ChannelTimings:
    """The lease timings of channel leaders plus the channel's own, checked together."""

    lease: Timings
    forward_timeout: float = 1.0
    check_interval: float = 2.0
    linger: float = 2.0

    def __post_init__(self) -> None:
        t = self.lease
        problems = []
        if self.forward_timeout * 3 > t.ttl:
            problems.append(
                f"forward_timeout={self.forward_timeout} must be at most a third of "
                f"ttl={t.ttl}: the lease must outlast several forwarded subscribes"
            )
        if self.forward_timeout < t.request_timeout:
            problems.append(
                f"forward_timeout={self.forward_timeout} must be at least "
                f"request_timeout={t.request_timeout}: a forwarded subscribe makes a store call"
            )
        if self.check_interval * 2 > t.ttl:
            problems.append(
                f"check_interval={self.check_interval} must be at most half of ttl={t.ttl}, "
                "so followers see a lost leader within a ttl"
            )
        if problems:
            raise ConfigError("invalid channel timings: " + "; ".join(problems))

    @property
    def watchdog(self) -> float:
        """How often a leader checks that its leases are inside their renew deadline: a
        fraction of the margin between that deadline and the expiry, so its upstreams stop
        before the store may let another node lead."""
        return max(0.01, min(0.1, self.lease.stop_margin / 4))


__all__ = ["ChannelTimings", "ChannelsConfig"]
