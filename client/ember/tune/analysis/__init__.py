"""Tune's experiment analysis (Ray's `ray.tune.analysis`)."""
from __future__ import annotations

from .experiment_analysis import ExperimentAnalysis

__all__ = ["ExperimentAnalysis"]
