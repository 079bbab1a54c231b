"""`ember.autoscaler`, as `ray.autoscaler`: `sdk.request_resources` from a program; the
autoscaler process itself (`ember autoscaler --config cluster.yaml`) lives in `_private`
(README.md there: the loop, the policy and the node providers)."""
from __future__ import annotations

from . import sdk

__all__ = ["sdk"]
