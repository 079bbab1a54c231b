"""A budget for log records a caller can trigger at will (a rejected call per request): at most
`burst` at once and `per_s` a second after that; what it holds back is counted and named in the
next record it lets through ("N more not logged"), so a flood costs a few lines a second.
Pure: the clock is injectable (tests/unit/operations/test_log_limit.py).
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable


class LogBudget:
    """A token bucket of log records (thread-safe)."""

    def __init__(self, per_s: float, burst: int, clock: Callable[[], float] = time.monotonic) -> None:
        if per_s <= 0 or burst < 1:
            raise ValueError(f"a log budget needs per_s > 0 and burst >= 1, got {per_s}, {burst}")
        self.per_s, self.burst, self._clock = per_s, burst, clock
        self._tokens, self._at = float(burst), clock()
        self._held = 0
        self._lock = threading.Lock()

    def take(self) -> int | None:
        """None: hold this record back (counted). Else log it, mentioning the returned number
        of records held back since the last one logged (0: none)."""
        with self._lock:
            now = self._clock()
            self._tokens = min(float(self.burst), self._tokens + (now - self._at) * self.per_s)
            self._at = now
            if self._tokens < 1:
                self._held += 1
                return None
            self._tokens -= 1
            held, self._held = self._held, 0
            return held


def held_note(held: int, what: str) -> str:
    """' (N more WHAT not logged)' for a record that follows held-back ones, else ''."""
    return f" ({held} more {what} not logged)" if held else ""
