"""RayBackend: joblib's multiprocessing backend with an Ember actor pool as its pool."""
from __future__ import annotations

from typing import Any

from joblib._parallel_backends import MultiprocessingBackend  # type: ignore[import-untyped]

import ember
from ember.util.multiprocessing import Pool


class RayBackend(MultiprocessingBackend):  # type: ignore[misc]
    """joblib's backend "ray": batches run on the actors of a Pool."""

    supports_retrieve_callback = True

    def __init__(self, nesting_level: int | None = None, inner_max_num_threads: int | None = None,
                 ray_remote_args: dict[str, Any] | None = None, **kwargs: Any) -> None:
        self.ray_remote_args = ray_remote_args
        super().__init__(nesting_level=nesting_level,
                         inner_max_num_threads=inner_max_num_threads, **kwargs)

    def effective_n_jobs(self, n_jobs: int | None) -> int:
        """n_jobs, with -1 (and other negatives) counted from the cluster's CPUs."""
        if n_jobs == 0:
            raise ValueError("n_jobs == 0 in Parallel has no meaning")
        if n_jobs is None:
            return 1
        if n_jobs < 0:
            if not ember.is_initialized():
                ember.init()
            cpus = int(ember.cluster_resources().get("CPU", 1))
            return max(cpus + 1 + n_jobs, 1)
        return int(n_jobs)

    def configure(self, n_jobs: int = 1, parallel: Any = None, prefer: Any = None,
                  require: Any = None, **pool_kwargs: Any) -> int:
        """Starts the actor pool; returns its size. `pool_kwargs` are joblib's memory-mapping
        settings for its own process pools (max_nbytes, mmap_mode, temp_folder), which joblib
        passes to every backend; arguments reach the actors through Ember's object store
        instead, so they have nothing to configure here (Ray's backend ignores them too)."""
        n_jobs = self.effective_n_jobs(n_jobs)
        self._pool = Pool(processes=n_jobs, ray_remote_args=self.ray_remote_args)
        self.parallel = parallel
        return n_jobs
