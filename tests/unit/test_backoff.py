"""The one retry wait (:class:`baton.backoff.Backoff`): doubling, capped, reset by a success."""

from __future__ import annotations

import pytest

from baton.backoff import Backoff


def test_it_doubles_up_to_the_longest_and_starts_over_after_a_success() -> None:
    b = Backoff(0.5, 3.0)
    assert [b.next() for _ in range(5)] == [0.5, 1.0, 2.0, 3.0, 3.0]
    assert b.current == 3.0
    b.reset()
    assert (b.current, b.next(), b.next()) == (0.5, 0.5, 1.0)


def test_a_backoff_that_cannot_wait_is_refused() -> None:
    for first, most in [(0, 1), (-1, 1), (2, 1)]:
        with pytest.raises(ValueError, match="0 < first <= most"):
            Backoff(first, most)
