"""Election and lease timings: one frozen, validated value with the same defaults everywhere.

The defaults follow the rule of thumb of the channel-leader design (request timeout + refresh
interval well inside the expiry) and Kubernetes' client-go (15 s / 10 s / 2 s), scaled so that a
lost leader is replaced in about ten seconds:

=================  =======  ==========================================================
ttl                10 s     how long the store keeps a lease without a renewal
renew_interval     2 s      how often the leader renews (5 renewals per ttl)
renew_deadline     7 s      a leader that has not renewed for this long stops acting
request_timeout    0.5 s    one store call; a slower answer counts as a failure
election_timeout   0.05-0.3 s  random wait before a follower campaigns for a free lease
                            (``for_ttl`` scales it down with a shorter ttl: 10-60 ms at 2 s)
=================  =======  ==========================================================

Why ``renew_deadline < ttl`` is the heart of safety: the leader measures the deadline on its own
monotonic clock from the moment it *sent* its last successful renewal; the store measures the
expiry on its own clock from the moment it *processed* that renewal, which is later. So the
leader stops at least ``ttl - renew_deadline`` before anyone else can acquire, and that margin
must cover stopping the leader's work (and clock-rate drift, which is parts per million).
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any

from baton.errors import ConfigError

#: The least ``for_ttl`` scales the longest random election wait down to (seconds).
_SPREAD_FLOOR = 0.05


@dataclass(frozen=True, slots=True)
class Timings:
    """Validated election timings, in seconds. Build with keywords; invalid combinations raise
    :class:`~baton.errors.ConfigError` naming the values that conflict and why."""

    ttl: float = 10.0
    renew_interval: float = 2.0
    renew_deadline: float = 7.0
    request_timeout: float = 0.5
    election_timeout_min: float = 0.05
    election_timeout_max: float = 0.3

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ConfigError(f"timing {f.name}={value!r} is not a number of seconds")
            if not value > 0:
                raise ConfigError(f"timing {f.name}={value} must be greater than 0 seconds")
        problems = self._conflicts()
        if problems:
            raise ConfigError("invalid timings: " + "; ".join(problems))

    def _conflicts(self) -> list[str]:
        t = self
        out: list[str] = []
        if t.renew_deadline >= t.ttl:
            out.append(
                f"renew_deadline={t.renew_deadline} must be less than ttl={t.ttl}, or a leader "
                "could still act after the store lets another node acquire"
            )
        elif t.ttl - t.renew_deadline < t.request_timeout:
            out.append(
                f"ttl={t.ttl} - renew_deadline={t.renew_deadline} must leave at least "
                f"request_timeout={t.request_timeout} for the leader to stop its work"
            )
        if t.renew_interval * 2 > t.ttl:
            out.append(
                f"renew_interval={t.renew_interval} allows fewer than two renewals per "
                f"ttl={t.ttl}; use renew_interval <= {t.ttl / 2:g}"
            )
        if t.renew_interval + t.request_timeout > t.renew_deadline:
            out.append(
                f"renew_interval={t.renew_interval} + request_timeout={t.request_timeout} "
                f"exceeds renew_deadline={t.renew_deadline}: a single slow renewal would "
                "depose a healthy leader"
            )
        if t.request_timeout >= t.renew_interval:
            out.append(
                f"request_timeout={t.request_timeout} must be less than "
                f"renew_interval={t.renew_interval}"
            )
        if t.election_timeout_min > t.election_timeout_max:
            out.append(
                f"election_timeout_min={t.election_timeout_min} is greater than "
                f"election_timeout_max={t.election_timeout_max}"
            )
        return out

    @classmethod
    def for_ttl(cls, ttl: float, **overrides: Any) -> Timings:
        """Timings scaled from the defaults to a different ``ttl`` (the other values keep their
        proportion to it; the election timeouts only shrink, to no less than 1/6 of theirs),
        with explicit ``overrides`` applied on top."""
        base = cls()
        k = ttl / base.ttl
        # The random wait only spreads the followers' campaigns (the store decides who wins), so
        # a short ttl need not pay the default's 50-300 ms: that would add 15% to a 2 s ttl's
        # failover. It stays a few store round trips wide (_SPREAD_FLOOR), so that the first
        # campaign's result still reaches most followers before they campaign, and a longer ttl
        # keeps the default: a longer wait would not spread campaigns any better.
        spread = max(min(k, 1.0), _SPREAD_FLOOR / base.election_timeout_max)
        scaled = cls(
            ttl=ttl,
            renew_interval=base.renew_interval * k,
            renew_deadline=base.renew_deadline * k,
            request_timeout=base.request_timeout * k,
            election_timeout_min=round(base.election_timeout_min * spread, 4),
            election_timeout_max=round(base.election_timeout_max * spread, 4),
        )
        return replace(scaled, **overrides) if overrides else scaled

    @property
    def stop_margin(self) -> float:
        """Seconds between a leader giving up (renew deadline) and the earliest moment the store
        could let someone else acquire (ttl)."""
        return self.ttl - self.renew_deadline
