"""ember.util: ActorPool and other helpers on top of the core API."""
from __future__ import annotations

from .actor_pool import ActorPool

__all__ = ["ActorPool"]
