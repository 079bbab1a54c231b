"""Trial schedulers (pure policies): FIFO, ASHA, HyperBand, median stopping, PBT, PB2.

    from ember.tune.schedulers import ASHAScheduler
"""
from __future__ import annotations

from typing import Any

from .async_hyperband import ASHAScheduler, AsyncHyperBandScheduler
from .hyperband import HyperBandScheduler
from .median_stopping_rule import MedianStoppingRule
from .pb2 import PB2
from .pbt import PopulationBasedTraining
from .trial_scheduler import FIFOScheduler, TrialList, TrialScheduler

__all__ = ["ASHAScheduler", "AsyncHyperBandScheduler", "FIFOScheduler", "HyperBandScheduler",
           "MedianStoppingRule", "PB2", "PopulationBasedTraining", "TrialList", "TrialScheduler",
           "create_scheduler"]

_BY_NAME = {"fifo": FIFOScheduler, "async_hyperband": AsyncHyperBandScheduler, "asha": ASHAScheduler,
            "hyperband": HyperBandScheduler, "median_stopping_rule": MedianStoppingRule,
            "pbt": PopulationBasedTraining, "pb2": PB2}


def create_scheduler(scheduler: str, **kwargs: Any) -> TrialScheduler:
    """A scheduler by name ("fifo", "asha", "async_hyperband", "hyperband", "median_stopping_rule", "pbt", "pb2")."""
    if scheduler not in _BY_NAME:
        raise ValueError(f"unknown scheduler {scheduler!r}; known: {sorted(_BY_NAME)}")
    return _BY_NAME[scheduler](**kwargs)
