"""Scheduling strategies (Ray 2.60's `ray.util.scheduling_strategies`), for
`.options(scheduling_strategy=...)` of tasks and actors. Besides these classes the strings
"DEFAULT" and "SPREAD" are accepted."""
from __future__ import annotations

from ember._private.api.scheduling import NodeAffinitySchedulingStrategy, PlacementGroupSchedulingStrategy

__all__ = ["NodeAffinitySchedulingStrategy", "PlacementGroupSchedulingStrategy"]
