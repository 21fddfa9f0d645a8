from __future__ import annotations

import dataclasses

import pytest

from baton.errors import ConfigError
from baton.lease.timings import Timings


def test_defaults_are_valid_and_frozen() -> None:
    t = Timings()
    assert t.renew_deadline < t.ttl
    assert t.ttl / t.renew_interval >= 2
    with pytest.raises(dataclasses.FrozenInstanceError):
        t.ttl = 1  # type: ignore[misc]


@pytest.mark.parametrize(
    ("kwargs", "names"),
    [
        ({"renew_deadline": 10.0}, ["renew_deadline=10.0", "ttl=10.0"]),
        ({"renew_deadline": 12.0}, ["renew_deadline=12.0", "ttl=10.0"]),
        ({"renew_interval": 6.0, "renew_deadline": 7.0}, ["renew_interval=6.0", "two renewals"]),
        ({"request_timeout": 2.0}, ["request_timeout=2.0", "renew_interval=2.0"]),
        ({"renew_interval": 2.0, "renew_deadline": 2.2}, ["renew_deadline=2.2"]),
        ({"election_timeout_min": 1.0, "election_timeout_max": 0.5}, ["election_timeout_min"]),
        ({"ttl": 0}, ["ttl=0"]),
        ({"ttl": -1}, ["ttl=-1"]),
        ({"ttl": "10"}, ["ttl='10'"]),
        ({"renew_deadline": 9.8}, ["leave at least request_timeout"]),
    ],
)
def test_contradictions_are_refused_naming_the_values(
    kwargs: dict[str, object], names: list[str]
) -> None:
    with pytest.raises(ConfigError) as info:
        Timings(**kwargs)  # type: ignore[arg-type]
    for name in names:
        assert name in str(info.value)


def test_for_ttl_scales_consistently() -> None:
    t = Timings.for_ttl(2.0)
    assert t.ttl == 2.0 and t.renew_deadline == pytest.approx(1.4)
    assert t.stop_margin == pytest.approx(0.6)
    with pytest.raises(ConfigError):
        Timings.for_ttl(2.0, renew_deadline=2.5)


def test_a_shorter_ttl_shortens_the_random_wait_and_a_longer_one_keeps_it() -> None:
    # A 2 s ttl paying the default 50-300 ms would add 15% to every failover; the wait still
    # spreads campaigns over some store round trips, and never grows past the default.
    short, default, long = Timings.for_ttl(2), Timings(), Timings.for_ttl(60)
    assert (short.election_timeout_min, short.election_timeout_max) == (0.01, 0.06)
    assert (long.election_timeout_min, long.election_timeout_max) == (
        default.election_timeout_min,
        default.election_timeout_max,
    )
    tiny = Timings.for_ttl(0.2)
    assert tiny.election_timeout_max == 0.05
    assert Timings.for_ttl(2, election_timeout_max=0.5).election_timeout_max == 0.5
