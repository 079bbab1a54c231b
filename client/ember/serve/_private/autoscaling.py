"""Autoscaling decisions, as a pure class: ongoing-request samples in, a replica target out.

The desired count is ceil(total ongoing / target_ongoing_requests), clipped to
[min_replicas, max_replicas]. A change only happens once the desire has pointed the same way for
the whole delay (upscale_delay_s up, downscale_delay_s down, downscale_to_zero_delay_s for the
last replica), and a downscale goes to the *largest* desire seen during its delay window, so a
bursty load cannot make the target oscillate. From 0 replicas any demand scales up at once
(cold start), as Ray does.
"""
from __future__ import annotations

import math

from ember.serve.config import AutoscalingConfig


class AutoscalingPolicy:
    """Feed decide(now, current_target, ongoing) at each control tick; it returns the new target."""

    def __init__(self, config: AutoscalingConfig) -> None:
        self.config = config
        self._up_since: float | None = None
        self._down_since: float | None = None
        self._down_peak = 0

    def desired(self, ongoing: float) -> int:
        """The replica count the load asks for, before delays."""
        c = self.config
        raw = math.ceil(ongoing / c.target_ongoing_requests - 1e-9) if ongoing > 0 else 0
        return max(c.min_replicas, min(c.max_replicas, raw))

    def decide(self, now: float, current: int, ongoing: float) -> int:
        """The new target replica count given the total ongoing (running + queued) requests."""
        c = self.config
        want = self.desired(ongoing)
        if current < c.min_replicas:
            self._reset()
            return c.min_replicas
        if current > c.max_replicas:
            self._reset()
            return c.max_replicas
        if current == 0 and ongoing > 0:  # cold start: never keep requests waiting on a delay
            self._reset()
            return max(1, want)
        if want > current:
            self._down_since = None
            if self._up_since is None:
                self._up_since = now
            if now - self._up_since >= c.upscale_delay_s:
                self._reset()
                return want
            return current
        if want < current:
            self._up_since = None
            if self._down_since is None:
                self._down_since = now
                self._down_peak = want
            self._down_peak = max(self._down_peak, want)
            target = self._down_peak
            delay = c.downscale_delay_s
            if target == 0:
                if current > 1:  # first down to one replica, then to zero after its own delay
                    target = 1
                elif c.downscale_to_zero_delay_s is not None:
                    delay = c.downscale_to_zero_delay_s
            if now - self._down_since >= delay:
                self._reset()
                return target
            return current
        self._reset()
        return current

    def _reset(self) -> None:
        self._up_since = None
        self._down_since = None
        self._down_peak = 0
