"""The etcd store's clock: what the one-second ``Date`` headers of etcd's answers prove about
the member's clock (pure: the answers are given, no server)."""

from __future__ import annotations

import time
from email.utils import formatdate

import pytest

from baton.errors import StoreUnavailable
from baton.store.etcd_gateway import ServerClock


def date(second: float) -> str:
    return formatdate(second, usegmt=True)


def test_no_answer_yet_is_an_error() -> None:
    with pytest.raises(StoreUnavailable):
        ServerClock().now()


def test_answers_straddling_a_second_narrow_the_clock_to_a_round_trip() -> None:
    clock = ServerClock()
    base = time.monotonic()
    server = 1_800_000_000.0  # the member's clock at local monotonic time `base`: x.0 exactly
    offset = server - base
    # Answers every 10 ms around the member's second boundary at base + 1.0, 2 ms round trips.
    for i in range(60, 140):
        sent = base + i / 100
        received = sent + 0.002
        clock.observe(sent, received, date(sent + 0.001 + offset))
    assert clock.uncertainty < 0.02
    now, latest = clock.now(), clock.latest()
    true = time.monotonic() + offset
    assert now <= true + 1e-6 and latest >= true - 1e-6
    assert latest - now < 0.03


def test_one_answer_bounds_the_clock_within_a_second() -> None:
    clock = ServerClock()
    sent = time.monotonic()
    offset = 1_800_000_000.4 - sent
    clock.observe(sent, sent + 0.001, date(sent + offset))
    true = time.monotonic() + offset
    assert clock.now() <= true <= clock.latest()
    assert clock.uncertainty < 1.01


def test_a_stepped_member_clock_starts_again_and_never_goes_back() -> None:
    clock = ServerClock()
    t = time.monotonic()
    clock.observe(t, t + 0.001, date(1_800_000_000))
    before = clock.now()
    clock.observe(t, t + 0.001, date(1_700_000_000))  # contradicts: start again from it
    assert clock.uncertainty < 1.01
    assert clock.now() >= before  # but a reading never goes backwards
