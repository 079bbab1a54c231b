"""GroupedData: `ds.groupby(key)` then count/sum/min/max/mean/std/aggregate/map_groups.

The aggregation classes live in `aggregate.py` (re-exported here for older imports).

Rows are range-partitioned by key (sampled boundaries, as `sort`), so every group is whole in
one reduce task; results come out sorted by key, as in Ray.
"""
from __future__ import annotations

from typing import Any

from ._internal import plan as P
from .aggregate import AggregateFn, Count, Max, Mean, Min, Std, Sum

__all__ = ["AggregateFn", "Count", "GroupedData", "Max", "Mean", "Min", "Std", "Sum"]


class GroupedData:
    """The result of Dataset.groupby."""

    def __init__(self, ds: Any, key: str | list[str] | None, num_partitions: int | None = None) -> None:
        self._ds = ds
        self._keys = [] if key is None else [key] if isinstance(key, str) else list(key)
        self._num_partitions = num_partitions

    def _sorted(self, params: dict[str, Any], name: str) -> Any:
        from .dataset import Dataset

        p = {"keys": self._keys, "descending": [False] * len(self._keys),
             "num_blocks": self._num_partitions, **params}
        return Dataset(P.AllToAll(name=name, inputs=[self._ds._plan], kind="sort", params=p))

    def aggregate(self, *aggs: AggregateFn) -> Any:
        """Applies the aggregations (ember.data.aggregate) per group: one row per group, sorted
        by key, with the key columns and one column per aggregation."""
        from ._internal.aggregation import validate

        validate(aggs, None)
        p: dict[str, Any] = {"reduce": "agg", "aggs": list(aggs)}
        if not self._keys:  # one group: everything in one reduce task
            p["boundaries"] = []
        return self._sorted(p, "Aggregate")

    def count(self) -> Any:
        """Rows per group (column "count()")."""
        return self.aggregate(Count())

    def _each(self, fn: Any, on: Any, **kw: Any) -> Any:
        cols = [on] if isinstance(on, str) else list(on)
        return self.aggregate(*[fn(c, **kw) for c in cols])

    def sum(self, on: Any, ignore_nulls: bool = True) -> Any:
        """sum(on) per group."""
        return self._each(Sum, on, ignore_nulls=ignore_nulls)

    def min(self, on: Any, ignore_nulls: bool = True) -> Any:
        """min(on) per group."""
        return self._each(Min, on, ignore_nulls=ignore_nulls)

    def max(self, on: Any, ignore_nulls: bool = True) -> Any:
        """max(on) per group."""
        return self._each(Max, on, ignore_nulls=ignore_nulls)

    def mean(self, on: Any, ignore_nulls: bool = True) -> Any:
        """mean(on) per group."""
        return self._each(Mean, on, ignore_nulls=ignore_nulls)

    def std(self, on: Any, ddof: int = 1, ignore_nulls: bool = True) -> Any:
        """std(on) per group."""
        return self._each(Std, on, ddof=ddof, ignore_nulls=ignore_nulls)

    def map_groups(self, fn: Any, *, batch_format: str | None = "default", fn_args: Any = None,
                   fn_kwargs: Any = None, **_: Any) -> Any:
        """Calls fn(batch) once per group; fn returns a batch."""
        if not self._keys:
            raise ValueError("map_groups() needs a groupby key")
        if not callable(fn):
            raise TypeError(f"map_groups() expects a function, got {type(fn).__name__}")
        name = f"MapGroups({getattr(fn, '__name__', type(fn).__name__)})"
        return self._sorted({"reduce": "map_groups", "fn": fn, "batch_format": batch_format,
                             "fn_args": tuple(fn_args or ()), "fn_kwargs": dict(fn_kwargs or {}),
                             "op_name": name}, name)
