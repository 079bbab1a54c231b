"""The log budget (ember_common.log_limit) on a fake clock: a burst, then per_s a second, and
the records held back counted into the next one let through."""
from __future__ import annotations

import pytest

from ember_common.log_limit import LogBudget, held_note


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_a_burst_then_the_rate_and_the_held_back_counted():
    clock = Clock()
    b = LogBudget(per_s=2.0, burst=3, clock=clock)
    assert [b.take() for _ in range(5)] == [0, 0, 0, None, None]
    clock.t = 0.5  # one record's worth
    assert b.take() == 2 and b.take() is None
    clock.t = 100.0  # refills to the burst, not beyond
    assert [b.take() for _ in range(4)] == [1, 0, 0, None]


def test_a_flood_is_a_few_records_a_second():
    clock = Clock()
    b = LogBudget(per_s=1.0, burst=10, clock=clock)
    logged = held = 0
    for i in range(100_000):  # 10,000 calls a second for 10 s
        clock.t = i / 10_000
        n = b.take()
        if n is not None:
            logged += 1
            held += n
    assert 10 <= logged <= 10 + 11  # the burst, then about one a second
    assert 85_000 < held < 100_000  # each held-back call is counted in a later record


def test_bad_settings_and_the_note():
    with pytest.raises(ValueError, match="per_s > 0 and burst >= 1"):
        LogBudget(per_s=0, burst=1)
    assert held_note(0, "calls") == "" and held_note(3, "rejected calls") == " (3 more rejected calls not logged)"
