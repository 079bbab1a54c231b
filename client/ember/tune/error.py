"""Tune's errors (Ray's `ray.tune.error`): `TuneError`, raised by `tune.run` when trials failed."""
from __future__ import annotations

__all__ = ["TuneError"]


class TuneError(Exception):
    """General error class raised by Ember Tune."""
