"""`Trial`, the record of one trainable run that the controller, schedulers and searchers share."""
from __future__ import annotations

from .trial import Trial

__all__ = ["Trial"]
