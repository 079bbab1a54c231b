"""ember.util.multiprocessing: `multiprocessing.Pool`'s API over a pool of actors (as
`ray.util.multiprocessing`). Replace `from multiprocessing import Pool` with
`from ember.util.multiprocessing import Pool`; the pool's processes are actors, so the work
spreads over the cluster."""
from __future__ import annotations

from multiprocessing import JoinableQueue, TimeoutError

from .pool import AsyncResult, Pool

__all__ = ["AsyncResult", "JoinableQueue", "Pool", "TimeoutError"]
