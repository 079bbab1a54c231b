"""`ember.experimental.internal_kv`, as `ray.experimental.internal_kv`: the GCS's internal KV.

The functions live in `ember._private.doors.internal_kv` (the one door libraries use); see its
docstring for where calls go and how they fail.
"""
from __future__ import annotations

from ember._private.doors.internal_kv import (
    _initialize_internal_kv,
    _internal_kv_del,
    _internal_kv_exists,
    _internal_kv_get,
    _internal_kv_initialized,
    _internal_kv_list,
    _internal_kv_put,
    _internal_kv_reset,
)

__all__ = ["_initialize_internal_kv", "_internal_kv_del", "_internal_kv_exists", "_internal_kv_get",
           "_internal_kv_initialized", "_internal_kv_list", "_internal_kv_put", "_internal_kv_reset"]
