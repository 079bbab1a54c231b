"""ember.train.huggingface: Hugging Face integrations (Ray's `ray.train.huggingface`)."""
from __future__ import annotations
