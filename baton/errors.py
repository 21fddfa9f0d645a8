"""baton's exception tree.

Every error a user can meet derives from :class:`BatonError`. Driver exceptions (redis-py,
psycopg, sqlite3) are translated once, at the backend boundary, with ``raise ... from exc``,
so callers never import a driver to catch its errors.

::

    BatonError
    ├── ConfigError            bad input: a URL, a timing, an argument (changes nothing)
    │   └── SpecError          an object's spec does not suit its workload type
    ├── StoreError             the coordination store failed us
    │   ├── StoreUnavailable   cannot connect, connection lost, server gone
    │   ├── StoreTimeout       the store did not answer within the request timeout
    │   └── FeedCompacted      a change-feed position is no longer available: re-list
    └── LeaseError             leadership problems
        ├── LeaseLost          a lease we held is gone (``reason`` says why)
        ├── NotLeader          a leader-only call made by a non-leader
        └── StaleEpoch         a side effect carried an epoch lower than one already seen

Messages say what was wrong, with the value, and what to do next. They never contain secrets:
store URLs are shown with their password removed (see :func:`redact_url`).
"""

from __future__ import annotations

import enum
import re


class BatonError(Exception):
    """Root of every error baton raises on purpose."""


class ConfigError(BatonError, ValueError):
    """Bad input: a configuration value, URL or argument. Nothing was changed."""


class SpecError(ConfigError):
    """An object's ``spec`` does not suit its workload type (see
    ``Workload.validate_spec``): refused when the object is created, and reported as the
    member's error by a node that is asked to run it anyway. Nothing was changed."""


class StoreError(BatonError):
    """The coordination store could not do what was asked."""


class StoreUnavailable(StoreError):
    """The store cannot be reached (refused, reset, server gone)."""


class StoreTimeout(StoreError):
    """The store did not answer within the request timeout."""


class FeedCompacted(StoreError):
    """A change-feed resume position is older than the retained log (or from a store that lost
    its data). Re-read the current state with ``list`` and watch from its position."""


class LossReason(enum.StrEnum):
    """Why a held lease stopped being ours."""

    EXPIRED = "expired"
    """The lease ran out at the store before it was renewed."""
    PREEMPTED = "preempted"
    """Another holder has it (it expired and was acquired, or was handed over)."""
    RELEASED = "released"
    """We gave it up: ``resign()``, ``elect(other)`` or a clean stop."""
    STORE_UNREACHABLE = "store unreachable"
    """No renewal succeeded within the renew deadline, so we stopped to stay safe."""


class LeaseError(BatonError):
    """A leadership problem."""


class LeaseLost(LeaseError):
    """A lease we held is no longer ours."""

    def __init__(self, name: str, reason: LossReason, detail: str = "") -> None:
        self.name = name
        self.reason = reason
        msg = f"lost lease {name!r}: {reason.value}"
        super().__init__(f"{msg} ({detail})" if detail else msg)


class NotLeader(LeaseError):
    """A leader-only operation was asked of a node that does not hold the lease."""


class StaleEpoch(LeaseError):
    """A side effect carried an epoch lower than the highest one already seen, or the lease it
    was conditioned on is no longer held at that epoch. It was refused and changed nothing."""


_URL_PASSWORD = re.compile(r"(?P<scheme>[a-z][a-z0-9+.-]*://)(?P<user>[^:/@]*):(?P<pw>[^@/]*)@")
_QUERY_SECRET = re.compile(r"(?i)(password|passwd|token|secret)=[^&\s]*")


def redact_url(url: str) -> str:
    """Return ``url`` with any password or secret query value replaced by ``***``."""
    out = _URL_PASSWORD.sub(lambda m: f"{m['scheme']}{m['user']}:***@", url)
    return _QUERY_SECRET.sub(lambda m: f"{m.group(1)}=***", out)
