"""The distributed evaluator starts the rounds asked for in the order the driver asked for them.

The evaluator node is a threaded Ray actor: two `request` calls sent back to back (a stopping run sends
every queued round at once) may run in either order. A run whose evaluator log read 500, 1500, 1000
is what this guards against."""

from __future__ import annotations

import pytest

from dmpo.distributed.evaluator import RoundRequests


def test_rounds_start_in_the_order_the_driver_numbered_them_whatever_order_they_arrive_in():
    rounds = RoundRequests()
    rounds.add(0, 500, [])
    assert rounds.pop_next() == (500, [])
    rounds.add(2, 1500, ["final"])  # arrives first
    assert rounds.pop_next() is None  # round 1 was asked for before it: wait for it
    rounds.add(1, 1000, ["boundary"])
    assert [rounds.pop_next(), rounds.pop_next(), rounds.pop_next()] == [
        (1000, ["boundary"]), (1500, ["final"]), None]
    assert (rounds.received, rounds.started) == (3, 3)


def test_unnumbered_requests_keep_their_arrival_order_and_a_number_is_used_once():
    rounds = RoundRequests()
    rounds.add(None, 10, [])
    rounds.add(None, 20, [])
    assert [rounds.pop_next(), rounds.pop_next()] == [(10, []), (20, [])]
    with pytest.raises(ValueError, match="number 1 was already given"):
        rounds.add(1, 30, [])
    rounds.add(2, 30, [])
    with pytest.raises(ValueError, match="number 2 was already given"):
        rounds.add(2, 40, [])
