"""Replica choice, as a pure class: power of two choices on in-flight requests, within each
replica's max_ongoing_requests, with a bounded queue in front (max_queued_requests).

Model multiplexing, as Ray's router: `choose(model_id)` picks among the replicas with room that
hold the model (as the replicas last reported it, `set_models`, or as this router sent it there
within the last GUESS_TTL_S, before any report could say so). When some replica holds it but none
has room, the request waits for one (None: the caller queues it) until its matching time is up
(`matching_deadline()`: Ray's 1–2 s); then, or when no replica holds the model, it goes to the
replicas with room holding the fewest models, by power of two choices. Waiting keeps a model's
requests where it is loaded: sending them elsewhere under load makes replicas load and evict
models in turn.

The proxy and every DeploymentHandle own one per deployment. I/O stays outside: callers ask
`choose()` for a replica, and report `release()` when the call ends.
"""
from __future__ import annotations

import random
import time
from typing import Callable, Generic, Hashable, Iterable, TypeVar

K = TypeVar("K", bound=Hashable)
GUESS_TTL_S = 5.0  # how long a model sent to a replica counts as held there without a report
MATCHING_TIMEOUT_S = 1.0  # Ray's RAY_SERVE_MULTIPLEXED_MODEL_ID_MATCHING_TIMEOUT_S default


class RouterCore(Generic[K]):
    """In-flight counts per replica key; choose() picks the less loaded of two random replicas
    that still have room, or None when all are full (the caller queues)."""

    def __init__(self, max_ongoing: int = 5, max_queued: int = -1, rng: random.Random | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.max_ongoing = max_ongoing
        self.max_queued = max_queued
        self.inflight: dict[K, int] = {}
        self.queued = 0
        self._rng = rng or random.Random()
        self._clock = clock
        self.models: dict[K, frozenset[str]] = {}  # as the replicas reported them
        self._guesses: dict[tuple[K, str], float] = {}  # (replica, model) sent there → when

    def set_replicas(self, keys: list[K]) -> None:
        """A new replica set: counts of kept replicas carry over; removed ones are forgotten."""
        self.inflight = {k: self.inflight.get(k, 0) for k in keys}

    def set_models(self, models: dict[K, Iterable[str]]) -> None:
        """The multiplexed model ids each replica reported holding (loaded or loading)."""
        self.models = {k: frozenset(v) for k, v in models.items()}

    def holds(self, key: K, model_id: str) -> bool:
        if model_id in self.models.get(key, ()):
            return True
        t = self._guesses.get((key, model_id))
        return t is not None and self._clock() - t < GUESS_TTL_S

    def _n_models(self, key: K) -> int:
        """How many models key holds, as reported or as this router recently sent there."""
        held = self.models.get(key, frozenset())
        now = self._clock()
        return len(held) + sum(1 for (k, m), t in self._guesses.items()
                               if k == key and m not in held and now - t < GUESS_TTL_S)

    def now(self) -> float:
        return self._clock()

    def matching_deadline(self) -> float:
        """When a request for a held model, waiting for its holders, may go to other replicas
        (Ray draws it between 1 and 2 matching timeouts)."""
        return self._clock() + self._rng.uniform(MATCHING_TIMEOUT_S, 2 * MATCHING_TIMEOUT_S)

    def has_room(self) -> bool:
        return any(n < self.max_ongoing for n in self.inflight.values())

    def choose(self, model_id: str = "", deadline: float | None = None) -> K | None:
        """A replica for a request (None: wait); `deadline` is the request's matching deadline
        (None: now, for a request that has not waited)."""
        keys = [k for k, n in self.inflight.items() if n < self.max_ongoing]
        if not keys:
            return None
        if model_id:
            holders = [k for k in keys if self.holds(k, model_id)]
            if holders:
                k = self._two_choices(holders)
            elif (deadline is None or self._clock() < deadline) and any(
                    self.holds(k, model_id) for k in self.inflight):
                return None  # its holders are full: wait for one of them
            else:
                fewest = min(self._n_models(k) for k in keys)
                k = self._two_choices([k for k in keys if self._n_models(k) == fewest])
                self._note(k, model_id)
        else:
            k = self._two_choices(keys)
        self.inflight[k] += 1
        return k

    def _two_choices(self, keys: list[K]) -> K:
        if len(keys) == 1:
            return keys[0]
        a, b = self._rng.sample(keys, 2)
        return a if (self.inflight[a], self._n_models(a)) <= (self.inflight[b], self._n_models(b)) else b

    def _note(self, key: K, model_id: str) -> None:
        """The model goes to key: count it as held there until a report says otherwise."""
        now = self._clock()
        if len(self._guesses) > 1024:
            self._guesses = {g: t for g, t in self._guesses.items() if now - t < GUESS_TTL_S}
        self._guesses[(key, model_id)] = now

    def release(self, key: K) -> None:
        if key in self.inflight and self.inflight[key] > 0:
            self.inflight[key] -= 1

    def can_queue(self) -> bool:
        """Whether one more request may wait (False → the proxy answers 503)."""
        return self.max_queued < 0 or self.queued < self.max_queued

    def total_inflight(self) -> int:
        return sum(self.inflight.values())
