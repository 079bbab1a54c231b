"""ember.util.joblib: joblib's "ray" backend (as `ray.util.joblib`).

    from ember.util.joblib import register_ray
    register_ray()
    with joblib.parallel_backend("ray"):
        Parallel(n_jobs=-1)(delayed(f)(x) for x in xs)   # scikit-learn's n_jobs too

The backend runs joblib's batches on an `ember.util.multiprocessing.Pool` (actors), so a
joblib program spreads over the cluster. n_jobs=-1 means the cluster's CPUs.
"""
from __future__ import annotations


def register_ray() -> None:
    """Registers the backend under the name "ray" with joblib (which must be installed)."""
    try:
        from joblib.parallel import register_parallel_backend  # type: ignore[import-untyped]
    except ImportError as e:
        raise ImportError("ember.util.joblib.register_ray needs joblib: pip install joblib") from e
    from .backend import RayBackend

    register_parallel_backend("ray", RayBackend)


__all__ = ["register_ray"]
