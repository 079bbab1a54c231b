"""The built-in aggregations that hold values rather than one number (exported by
ember.data.aggregate): Quantile, Unique, CountDistinct, AsList, ValueCounter,
MissingValuePercentage, ZeroPercentage, ApproximateQuantile, ApproximateTopK."""
from __future__ import annotations

import math
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from ember.data.aggregate import AggregateFnV2, _column, _no_counts, _two_zeros


def _values(block: pa.Table, on: str) -> list[Any]:
    values: list[Any] = _column(block, on).to_pylist()
    return values


class Quantile(AggregateFnV2):
    """The q-quantile of a column ("quantile(x)"), linearly interpolated between the two nearest
    values; exact (holds every value of a group until the end). None if a null is present and
    ignore_nulls=False."""

    def __init__(self, on: str | None = None, q: float = 0.5, ignore_nulls: bool = True,
                 alias_name: str | None = None) -> None:
        if not 0 <= q <= 1:
            raise ValueError(f"Quantile's q must be between 0 and 1, got {q}")
        self._q = q
        super().__init__(alias_name or f"quantile({on})", list, on=on, ignore_nulls=ignore_nulls)

    def aggregate_block(self, block: pa.Table) -> Any:
        return _values(block, self._target_col_name or "")

    def combine(self, current_accumulator: Any, new: Any) -> Any:
        return list(current_accumulator) + list(new)

    def finalize(self, accumulator: Any) -> Any:
        arr = pa.array(accumulator)
        if len(arr) == arr.null_count or (arr.null_count and not self._ignore_nulls):
            return None
        return pc.quantile(arr, q=self._q, skip_nulls=self._ignore_nulls)[0].as_py()


class Unique(AggregateFnV2):
    """The distinct values of a column ("unique(x)"), as a list; `encode_lists=True` takes the
    distinct elements of a list column instead of distinct lists."""

    def __init__(self, on: str | None = None, ignore_nulls: bool = False,
                 alias_name: str | None = None, encode_lists: Any = None) -> None:
        super().__init__(alias_name or f"unique({on})", set, on=on, ignore_nulls=ignore_nulls)
        if encode_lists not in (None, False, True, "FLATTEN"):
            raise ValueError(f"Unique: encode_lists={encode_lists!r} is not supported by Ember "
                             "(True or 'FLATTEN' flatten list columns)")
        self._flatten = encode_lists in (True, "FLATTEN")

    def _distinct(self, block: pa.Table) -> list[Any]:
        col = _column(block, self._target_col_name or "")
        if self._flatten and (pa.types.is_list(col.type) or pa.types.is_large_list(col.type)):
            col = pc.list_flatten(col)
        if self._ignore_nulls:
            col = col.drop_null()
        if pa.types.is_list(col.type) or pa.types.is_large_list(col.type):
            return list({None if v is None else tuple(v): None for v in col.to_pylist()})
        distinct: list[Any] = pc.unique(col).to_pylist()
        return distinct

    def aggregate_block(self, block: pa.Table) -> Any:
        return set(self._distinct(block))

    def combine(self, current_accumulator: Any, new: Any) -> Any:
        return set(current_accumulator) | set(new)

    def finalize(self, accumulator: Any) -> Any:
        return list(accumulator)


class CountDistinct(Unique):
    """How many distinct values a column has ("count_distinct(x)")."""

    def __init__(self, on: str, ignore_nulls: bool = True, alias_name: str | None = None) -> None:
        super().__init__(on=on, ignore_nulls=ignore_nulls,
                         alias_name=alias_name or f"count_distinct({on})")

    def finalize(self, accumulator: Any) -> Any:
        return len(accumulator)


class AsList(AggregateFnV2):
    """Every value of a column, in order, as one list ("list(x)")."""

    def __init__(self, on: str, alias_name: str | None = None, ignore_nulls: bool = False) -> None:
        super().__init__(alias_name or f"list({on})", list, on=on, ignore_nulls=ignore_nulls)

    def aggregate_block(self, block: pa.Table) -> Any:
        col = _column(block, self._target_col_name or "")
        return (col.drop_null() if self._ignore_nulls else col).to_pylist()

    def combine(self, current_accumulator: Any, new: Any) -> Any:
        return list(current_accumulator) + list(new)


class ValueCounter(AggregateFnV2):
    """How often each value of a column occurs ("value_counter(x)"):
    {"values": [...], "counts": [...]} in order of first appearance."""

    def __init__(self, on: str, alias_name: str | None = None) -> None:
        super().__init__(alias_name or f"value_counter({on})",
                         _no_counts, on=on, ignore_nulls=True)

    def aggregate_block(self, block: pa.Table) -> Any:
        vc = pc.value_counts(_column(block, self._target_col_name or ""))
        if len(vc) == 0:
            return None
        return {"values": vc.field("values").to_pylist(), "counts": vc.field("counts").to_pylist()}

    def combine(self, current_accumulator: Any, new: Any) -> Any:
        values = list(current_accumulator["values"])
        counts = list(current_accumulator["counts"])
        where = {v: i for i, v in enumerate(values)}
        for v, c in zip(new["values"], new["counts"], strict=True):
            if v in where:
                counts[where[v]] += c
            else:
                where[v] = len(values)
                values.append(v)
                counts.append(c)
        return {"values": values, "counts": counts}


class MissingValuePercentage(AggregateFnV2):
    """Share of nulls (and NaNs) in a column, in percent ("missing_pct(x)")."""

    def __init__(self, on: str, alias_name: str | None = None) -> None:
        super().__init__(alias_name or f"missing_pct({on})", _two_zeros, on=on,
                         ignore_nulls=False)

    def aggregate_block(self, block: pa.Table) -> Any:
        col = _column(block, self._target_col_name or "")
        nulls = pc.sum(pc.is_null(col, nan_is_null=True)).as_py() or 0
        return [nulls, len(col)]

    def combine(self, current_accumulator: Any, new: Any) -> Any:
        return [current_accumulator[0] + new[0], current_accumulator[1] + new[1]]

    def finalize(self, accumulator: Any) -> Any:
        return accumulator[0] / accumulator[1] * 100.0 if accumulator[1] else None


class ZeroPercentage(AggregateFnV2):
    """Share of zeros in a numeric column, in percent ("zero_pct(x)"); nulls leave the
    denominator when ignore_nulls=True."""

    def __init__(self, on: str, ignore_nulls: bool = True, alias_name: str | None = None) -> None:
        super().__init__(alias_name or f"zero_pct({on})", _two_zeros, on=on,
                         ignore_nulls=ignore_nulls)

    def aggregate_block(self, block: pa.Table) -> Any:
        col = _column(block, self._target_col_name or "")
        n = len(col) - col.null_count if self._ignore_nulls else len(col)
        if n == 0:
            return [0, 0]
        return [pc.sum(pc.equal(col, 0)).as_py() or 0, n]

    def combine(self, current_accumulator: Any, new: Any) -> Any:
        return [current_accumulator[0] + new[0], current_accumulator[1] + new[1]]

    def finalize(self, accumulator: Any) -> Any:
        return accumulator[0] / accumulator[1] * 100.0 if accumulator[1] else None


def rank_quantile(sorted_values: list[Any], q: float) -> Any:
    """The smallest value whose rank share is at least q (what a quantile sketch answers when
    it holds every value): sorted_values[ceil(q * n) - 1], the first value for q = 0."""
    n = len(sorted_values)
    return sorted_values[min(n - 1, max(0, math.ceil(q * n) - 1))]


class ApproximateQuantile(AggregateFnV2):
    """Quantiles of a column ("approx_quantile(x)"), a list with one value per entry of
    `quantiles`. Ember holds every value, so the answer is exact (the rank rule a KLL sketch
    approximates); quantile_precision, the sketch size in Ray, has nothing to tune. Nulls are
    ignored."""

    def __init__(self, on: str, quantiles: list[float], quantile_precision: int = 800,
                 alias_name: str | None = None) -> None:
        bad = [q for q in quantiles if not 0 <= q <= 1]
        if bad or not quantiles:
            raise ValueError(f"quantiles must be a non-empty list of values in [0, 1], got "
                             f"{quantiles}")
        self._quantiles = list(quantiles)
        self._quantile_precision = quantile_precision
        super().__init__(alias_name or f"approx_quantile({on})", list, on=on, ignore_nulls=True)

    def aggregate_block(self, block: pa.Table) -> Any:
        return _column(block, self._target_col_name or "").drop_null().to_pylist()

    def combine(self, current_accumulator: Any, new: Any) -> Any:
        return list(current_accumulator) + list(new)

    def finalize(self, accumulator: Any) -> Any:
        vals = sorted(float(v) for v in accumulator)
        return [rank_quantile(vals, q) for q in self._quantiles] if vals else None


class ApproximateTopK(AggregateFnV2):
    """The k most frequent values of a column ("approx_topk(x)"): [{on: value, "count": n}],
    most frequent first; exact in Ember (log_capacity, the sketch size in Ray, has nothing to
    tune). encode_lists=True counts the elements of list values."""

    def __init__(self, on: str, k: int, log_capacity: int = 15, alias_name: str | None = None,
                 encode_lists: bool = False) -> None:
        if not isinstance(k, int) or k < 1:
            raise ValueError(f"k must be an int >= 1, got {k!r}")
        self.k = k
        self._log_capacity = log_capacity
        self._encode_lists = encode_lists
        super().__init__(alias_name or f"approx_topk({on})", dict, on=on, ignore_nulls=True)

    def aggregate_block(self, block: pa.Table) -> Any:
        col = _column(block, self._target_col_name or "")
        if self._encode_lists and (pa.types.is_list(col.type) or pa.types.is_large_list(col.type)):
            col = pc.list_flatten(col)
        counts: dict[Any, int] = {}
        for v in col.drop_null().to_pylist():
            key = tuple(v) if isinstance(v, list) else v
            counts[key] = counts.get(key, 0) + 1
        return counts

    def combine(self, current_accumulator: Any, new: Any) -> Any:
        out = dict(current_accumulator)
        for v, n in new.items():
            out[v] = out.get(v, 0) + n
        return out

    def finalize(self, accumulator: Any) -> Any:
        top = sorted(accumulator.items(), key=lambda p: -p[1])[:self.k]
        on = self._target_col_name or ""
        return [{on: list(v) if isinstance(v, tuple) else v, "count": n} for v, n in top]
