"""Search algorithms: `BasicVariantGenerator` (random and grid, the default), `OptunaSearch`,
`BayesOptSearch`, `HyperOptSearch`, the `Searcher` interface, and the `ConcurrencyLimiter` / `Repeater` wrappers.

    from ember.tune.search import ConcurrencyLimiter
    from ember.tune.search.optuna import OptunaSearch
    from ember.tune.search.bayesopt import BayesOptSearch
    from ember.tune.search.hyperopt import HyperOptSearch
"""
from __future__ import annotations

from typing import Any

from .basic_variant import BasicVariantGenerator, SearchAlgorithm, SearchGenerator
from .searcher import ConcurrencyLimiter, Repeater, Searcher

__all__ = ["BasicVariantGenerator", "ConcurrencyLimiter", "Repeater", "SearchAlgorithm",
           "SearchGenerator", "Searcher", "create_searcher"]


def create_searcher(search_alg: str, **kwargs: Any) -> Searcher | SearchAlgorithm:
    """A search algorithm by name: "variant_generator"/"random", "optuna", "bayesopt" or "hyperopt"."""
    if search_alg in ("variant_generator", "random"):
        return BasicVariantGenerator(**kwargs)
    if search_alg == "optuna":
        from .optuna import OptunaSearch

        return OptunaSearch(**kwargs)
    if search_alg == "bayesopt":
        from .bayesopt import BayesOptSearch

        return BayesOptSearch(**kwargs)
    if search_alg == "hyperopt":
        from .hyperopt import HyperOptSearch

        return HyperOptSearch(**kwargs)
    raise ValueError(f"unknown search algorithm {search_alg!r}; known: 'variant_generator', 'random', "
                     "'optuna', 'bayesopt', 'hyperopt'")
