"""Ray's `ray.runtime_context`: the RuntimeContext class and get_runtime_context()."""
from __future__ import annotations

from ember._private.api.runtime_context import RuntimeContext, get_runtime_context

__all__ = ["RuntimeContext", "get_runtime_context"]
