"""Experimental APIs, as `ray.experimental`: `ember.experimental.internal_kv`, the GCS's KV."""
from __future__ import annotations

from ember.experimental import internal_kv

__all__ = ["internal_kv"]
