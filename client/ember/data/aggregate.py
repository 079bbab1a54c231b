"""Aggregations (Ray Data's `ray.data.aggregate`): Count, Sum, Min, Max, Mean, Std, AbsMax,
Quantile, Unique, CountDistinct, AsList, ValueCounter, MissingValuePercentage, ZeroPercentage,
and the base classes users extend (AggregateFnV2; the older AggregateFn).

    from ember.data.aggregate import Mean, Sum
    ds.aggregate(Sum("x"), Mean("y"))          # {"sum(x)": ..., "mean(y)": ...}
    ds.groupby("k").aggregate(Sum("x")).take_all()

An aggregation is a monoid over blocks: `aggregate_block(block)` makes a partial accumulator of
one block (of one group), `combine(a, b)` merges two partials, `finalize(acc)` turns the last one
into the result. Nulls follow Ray's rule: with `ignore_nulls=True` an accumulator of None means
"nothing seen yet"; with `ignore_nulls=False` a None means "a null was seen" and wins every merge.
These classes are pure (no cluster): the executor calls `init`, `accumulate_block`, `merge` and
`finalize`; the built-ins also name a vectorized Arrow kernel for grouped reduction.
"""
from __future__ import annotations

import abc
import math
from typing import Any, Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["AbsMax", "ApproximateQuantile", "ApproximateTopK", "AggregateFn", "AggregateFnV2", "AsList", "Count", "CountDistinct", "Max",
           "Mean", "Min", "MissingValuePercentage", "Quantile", "Std", "Sum", "Unique",
           "ValueCounter", "ZeroPercentage"]


def is_null(v: Any) -> bool:
    """True for None, NaN and Arrow nulls (Ray's notion of a null accumulator)."""
    if v is None:
        return True
    if isinstance(v, float) and math.isnan(v):
        return True
    if isinstance(v, pa.Scalar):
        return not v.is_valid
    return False


def _column(block: pa.Table, on: str) -> pa.ChunkedArray:
    if on not in block.column_names:
        raise KeyError(f"no column {on!r} to aggregate on; the columns are {block.column_names}")
    return block.column(on)


class AggregateFn:
    """A custom aggregation from functions (Ray's older form, kept for its users).

    init(key) makes an accumulator, accumulate_row(acc, row) or accumulate_block(acc, block)
    folds rows in, merge(a, b) joins two accumulators, finalize(acc) gives the result.
    """

    def __init__(self, init: Callable[[Any], Any], merge: Callable[[Any, Any], Any], name: str,
                 accumulate_row: Callable[[Any, Any], Any] | None = None,
                 accumulate_block: Callable[[Any, pa.Table], Any] | None = None,
                 finalize: Callable[[Any], Any] | None = None) -> None:
        if (accumulate_row is None) == (accumulate_block is None):
            raise ValueError("exactly one of accumulate_row and accumulate_block must be given")
        if not isinstance(name, str) or not name:
            raise TypeError(f"an aggregation needs a non-empty string name, got {name!r}")
        if accumulate_block is None:
            row_fn = accumulate_row

            def accumulate_block(acc: Any, block: pa.Table) -> Any:
                for row in block.to_pylist():
                    acc = row_fn(acc, row)  # type: ignore[misc]  # not None: checked above
                return acc

        self.name = name
        self.init = init
        self.merge = merge
        self.accumulate_block = accumulate_block
        self.finalize = finalize if finalize is not None else (lambda a: a)

    def _validate(self, schema: pa.Schema | None) -> None:
        """Raises if this aggregation cannot run on a dataset of this schema."""

    def _arrow_kernel(self) -> tuple[str, Any] | None:
        """(pyarrow group_by function, options) that computes this aggregation per group at once,
        or None: the grouped path then calls aggregate_block per group."""
        return None


class AggregateFnV2(AggregateFn, abc.ABC):
    """Base of the built-in aggregations and of user ones: subclass it and define
    `aggregate_block(block)` and `combine(current_accumulator, new)` (and `finalize(acc)` when
    the accumulator is not the result). `name` is the output column; `zero_factory()` the empty
    accumulator; `on` the column (None: whole rows); `ignore_nulls` as in Ray."""

    def __init__(self, name: str, zero_factory: Callable[[], Any], *, on: str | None,
                 ignore_nulls: bool) -> None:
        if not name:
            raise ValueError(f"an aggregation needs a non-empty name, got {name!r}")
        self._target_col_name = on
        self._ignore_nulls = ignore_nulls
        self._zero_factory = zero_factory
        self._agg_name = name.split("(", 1)[0] if name.endswith(")") and "(" in name else name
        super().__init__(name=name, init=self._safe_init, merge=self._safe_combine,
                         accumulate_block=self._safe_accumulate, finalize=self._safe_finalize)

    def get_target_column(self) -> str | None:
        """The column aggregated (None for whole rows)."""
        return self._target_col_name

    def get_agg_name(self) -> str:
        """The kind of aggregation ("sum" for "sum(x)")."""
        return self._agg_name

    @abc.abstractmethod
    def combine(self, current_accumulator: Any, new: Any) -> Any:
        """Merges a partial accumulator into the current one."""

    @abc.abstractmethod
    def aggregate_block(self, block: pa.Table) -> Any:
        """The partial accumulator of one block."""

    def finalize(self, accumulator: Any) -> Any:
        """The result from the last accumulator (`_finalize`, itself by default)."""
        return self._finalize(accumulator)

    def _finalize(self, accumulator: Any) -> Any:
        """Older spelling of `finalize`, still honoured."""
        return accumulator

    def _validate(self, schema: pa.Schema | None) -> None:
        on = self._target_col_name
        if on and schema is not None and len(schema) and on not in schema.names:
            raise ValueError(f"{self.name}: no column {on!r} in the dataset; the columns are "
                             f"{list(schema.names)}")

    # Ray's null protocol: None is "empty" when nulls are ignored, "poisoned" when they are not.
    def _safe_init(self, _key: Any = None) -> Any:
        return None if self._ignore_nulls else self._zero_factory()

    def _safe_accumulate(self, _acc: Any, block: pa.Table) -> Any:
        out = self.aggregate_block(block)
        return None if (self._ignore_nulls and is_null(out)) else out

    def _safe_combine(self, cur: Any, new: Any) -> Any:
        if self._ignore_nulls:
            if is_null(cur):
                return new
            if is_null(new):
                return cur
        else:
            if is_null(new):
                return new
            if is_null(cur):
                return cur
        return self.combine(cur, new)

    def _safe_finalize(self, acc: Any) -> Any:
        return acc if is_null(acc) else type(self).finalize(self, acc)


def _zero() -> int:
    return 0


def _two_zeros() -> list[int]:
    return [0, 0]


def _three_zeros() -> list[int]:
    return [0, 0, 0]


def _pos_inf() -> float:
    return float("inf")


def _neg_inf() -> float:
    return float("-inf")


def _no_counts() -> dict[str, list[Any]]:
    return {"values": [], "counts": []}


def _scalar_opts(ignore_nulls: bool) -> pc.ScalarAggregateOptions:
    return pc.ScalarAggregateOptions(skip_nulls=ignore_nulls, min_count=1 if ignore_nulls else 0)


def _reduce(fn: Callable[..., pa.Scalar], col: pa.ChunkedArray, ignore_nulls: bool) -> Any:
    if not ignore_nulls and col.null_count:
        return None
    if len(col) - col.null_count == 0:
        return None
    return fn(col, options=_scalar_opts(ignore_nulls)).as_py()


class Count(AggregateFnV2):
    """Rows (`on=None`, column "count()") or values of a column ("count(x)"); nulls are counted
    unless ignore_nulls=True."""

    def __init__(self, on: str | None = None, ignore_nulls: bool = False,
                 alias_name: str | None = None) -> None:
        super().__init__(alias_name or f"count({on or ''})", _zero, on=on,
                         ignore_nulls=ignore_nulls)

    def aggregate_block(self, block: pa.Table) -> Any:
        if self._target_col_name is None:
            return block.num_rows
        col = _column(block, self._target_col_name)
        return len(col) - col.null_count if self._ignore_nulls else len(col)

    def combine(self, current_accumulator: Any, new: Any) -> Any:
        return current_accumulator + new

    def _arrow_kernel(self) -> tuple[str, Any] | None:
        if self._target_col_name is None:
            return ("count_all", None)
        return ("count", pc.CountOptions(mode="only_valid" if self._ignore_nulls else "all"))


class Sum(AggregateFnV2):
    """Sum of a column ("sum(x)"); None if every value is null (or any is, with ignore_nulls=False)."""

    def __init__(self, on: str | None = None, ignore_nulls: bool = True,
                 alias_name: str | None = None) -> None:
        super().__init__(alias_name or f"sum({on})", _zero, on=on, ignore_nulls=ignore_nulls)

    def aggregate_block(self, block: pa.Table) -> Any:
        return _reduce(pc.sum, _column(block, self._target_col_name or ""), self._ignore_nulls)

    def combine(self, current_accumulator: Any, new: Any) -> Any:
        return current_accumulator + new

    def _arrow_kernel(self) -> tuple[str, Any] | None:
        return ("sum", pc.ScalarAggregateOptions(skip_nulls=self._ignore_nulls, min_count=1))


class Min(AggregateFnV2):
    """Smallest value of a column ("min(x)")."""

    def __init__(self, on: str | None = None, ignore_nulls: bool = True,
                 alias_name: str | None = None,
                 zero_factory: Callable[[], Any] = _pos_inf) -> None:
        super().__init__(alias_name or f"min({on})", zero_factory, on=on,
                         ignore_nulls=ignore_nulls)

    def aggregate_block(self, block: pa.Table) -> Any:
        return _reduce(pc.min, _column(block, self._target_col_name or ""), self._ignore_nulls)

    def combine(self, current_accumulator: Any, new: Any) -> Any:
        return min(current_accumulator, new)

    def _arrow_kernel(self) -> tuple[str, Any] | None:
        return ("min", pc.ScalarAggregateOptions(skip_nulls=self._ignore_nulls, min_count=1))


class Max(AggregateFnV2):
    """Largest value of a column ("max(x)")."""

    def __init__(self, on: str | None = None, ignore_nulls: bool = True,
                 alias_name: str | None = None,
                 zero_factory: Callable[[], Any] = _neg_inf) -> None:
        super().__init__(alias_name or f"max({on})", zero_factory, on=on,
                         ignore_nulls=ignore_nulls)

    def aggregate_block(self, block: pa.Table) -> Any:
        return _reduce(pc.max, _column(block, self._target_col_name or ""), self._ignore_nulls)

    def combine(self, current_accumulator: Any, new: Any) -> Any:
        return max(current_accumulator, new)

    def _arrow_kernel(self) -> tuple[str, Any] | None:
        return ("max", pc.ScalarAggregateOptions(skip_nulls=self._ignore_nulls, min_count=1))


class Mean(AggregateFnV2):
    """Arithmetic mean of a column ("mean(x)"); accumulator [sum, count]."""

    def __init__(self, on: str | None = None, ignore_nulls: bool = True,
                 alias_name: str | None = None) -> None:
        super().__init__(alias_name or f"mean({on})", _two_zeros, on=on,
                         ignore_nulls=ignore_nulls)

    def aggregate_block(self, block: pa.Table) -> Any:
        col = _column(block, self._target_col_name or "")
        total = _reduce(pc.sum, col, self._ignore_nulls)
        if total is None:
            return None
        return [total, len(col) - col.null_count]

    def combine(self, current_accumulator: Any, new: Any) -> Any:
        return [current_accumulator[0] + new[0], current_accumulator[1] + new[1]]

    def finalize(self, accumulator: Any) -> Any:
        return accumulator[0] / accumulator[1] if accumulator[1] else float("nan")

    def _arrow_kernel(self) -> tuple[str, Any] | None:
        return ("mean", pc.ScalarAggregateOptions(skip_nulls=self._ignore_nulls, min_count=1))


class Std(AggregateFnV2):
    """Standard deviation ("std(x)", divisor N - ddof); accumulator [M2, mean, count], merged
    with the parallel form of Welford's update. NaN when N - ddof <= 0."""

    def __init__(self, on: str | None = None, ddof: int = 1, ignore_nulls: bool = True,
                 alias_name: str | None = None) -> None:
        super().__init__(alias_name or f"std({on})", _three_zeros, on=on,
                         ignore_nulls=ignore_nulls)
        self._ddof = ddof

    def aggregate_block(self, block: pa.Table) -> Any:
        col = _column(block, self._target_col_name or "")
        if (not self._ignore_nulls and col.null_count) or len(col) == col.null_count:
            return None
        x = col.drop_null().to_numpy().astype(np.float64)
        mean = float(x.mean())
        return [float(((x - mean) ** 2).sum()), mean, len(x)]

    def combine(self, current_accumulator: Any, new: Any) -> Any:
        m2a, ma, na = current_accumulator
        m2b, mb, nb = new
        n = na + nb
        if n == 0:
            return [0, 0, 0]
        mean = (ma * na + mb * nb) / n
        return [m2a + m2b + (mb - ma) ** 2 * na * nb / n, mean, n]

    def finalize(self, accumulator: Any) -> Any:
        m2, _, n = accumulator
        return math.sqrt(m2 / (n - self._ddof)) if n - self._ddof > 0 else float("nan")

    def _arrow_kernel(self) -> tuple[str, Any] | None:
        return ("stddev", pc.VarianceOptions(ddof=self._ddof, skip_nulls=self._ignore_nulls,
                                             min_count=0))


class AbsMax(AggregateFnV2):
    """Largest absolute value of a column ("abs_max(x)")."""

    def __init__(self, on: str | None = None, ignore_nulls: bool = True,
                 alias_name: str | None = None) -> None:
        if not isinstance(on, str):
            raise ValueError(f"AbsMax needs the column to aggregate on, got {on!r}")
        super().__init__(alias_name or f"abs_max({on})", _zero, on=on,
                         ignore_nulls=ignore_nulls)

    def aggregate_block(self, block: pa.Table) -> Any:
        col = _column(block, self._target_col_name or "")
        return _reduce(pc.max, pc.abs(col), self._ignore_nulls)

    def combine(self, current_accumulator: Any, new: Any) -> Any:
        return max(current_accumulator, new)


# The aggregations that hold values (quantiles, distinct values, lists, counters, shares) live
# in a private module; they are part of this module's face.
from ._internal.aggregate_more import (  # noqa: E402
    ApproximateQuantile,
    ApproximateTopK,
    AsList,
    CountDistinct,
    MissingValuePercentage,
    Quantile,
    Unique,
    ValueCounter,
    ZeroPercentage,
)
