"""Replica choice, as a pure class: power of two choices on in-flight requests, within each
replica's max_ongoing_requests, with a bounded queue in front (max_queued_requests).

The proxy and every DeploymentHandle own one per deployment. I/O stays outside: callers ask
`choose()` for a replica, and report `release()` when the call ends.
"""
from __future__ import annotations

import random
from typing import Generic, Hashable, TypeVar

K = TypeVar("K", bound=Hashable)


class RouterCore(Generic[K]):
    """In-flight counts per replica key; choose() picks the less loaded of two random replicas
    that still have room, or None when all are full (the caller queues)."""

    def __init__(self, max_ongoing: int = 5, max_queued: int = -1, rng: random.Random | None = None) -> None:
        self.max_ongoing = max_ongoing
        self.max_queued = max_queued
        self.inflight: dict[K, int] = {}
        self.queued = 0
        self._rng = rng or random.Random()

    def set_replicas(self, keys: list[K]) -> None:
        """A new replica set: counts of kept replicas carry over; removed ones are forgotten."""
        self.inflight = {k: self.inflight.get(k, 0) for k in keys}

    def choose(self) -> K | None:
        keys = [k for k, n in self.inflight.items() if n < self.max_ongoing]
        if not keys:
            return None
        if len(keys) == 1:
            k = keys[0]
        else:
            a, b = self._rng.sample(keys, 2)
            k = a if self.inflight[a] <= self.inflight[b] else b
        self.inflight[k] += 1
        return k

    def release(self, key: K) -> None:
        if key in self.inflight and self.inflight[key] > 0:
            self.inflight[key] -= 1

    def can_queue(self) -> bool:
        """Whether one more request may wait (False → the proxy answers 503)."""
        return self.max_queued < 0 or self.queued < self.max_queued

    def total_inflight(self) -> int:
        return sum(self.inflight.values())
