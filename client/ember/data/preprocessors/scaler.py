"""Scalers: StandardScaler, MinMaxScaler, MaxAbsScaler, RobustScaler (Ray's stats names and
constant-column rules: a zero spread divides by 1, RobustScaler's zero range gives zeros)."""
from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from ember.data.aggregate import AbsMax, ApproximateQuantile, Max, Mean, Min, Std

from ._base import Preprocessor, as_float, upsert
from ._base import output_columns as output_columns_of

_EPSILON = 1e-8


class _ColumnScaler(Preprocessor):
    def __init__(self, columns: list[str], output_columns: list[str] | None = None) -> None:
        super().__init__()
        self.columns = list(columns)
        self.output_columns = output_columns_of(columns, output_columns)

    def _scale(self, x: np.ndarray, col: str) -> np.ndarray | None:  # pragma: no cover
        raise NotImplementedError

    def _transform_arrow(self, table: pa.Table) -> pa.Table:
        for col, out in zip(self.columns, self.output_columns, strict=True):
            x = as_float(table, col)
            y = self._scale(x, col)
            table = upsert(table, out, pa.nulls(len(x), pa.float64()) if y is None else
                           pa.array(y, from_pandas=True))
        return table

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(columns={self.columns!r}, "
                f"output_columns={self.output_columns!r})")





class StandardScaler(_ColumnScaler):
    """(x - mean) / std per column (population std, ddof=0); stats "mean(x)", "std(x)"."""

    def _fit(self, ds: Any) -> Preprocessor:
        self._add_aggs(Mean, self.columns)
        self._add_aggs(lambda c: Std(c, ddof=0), self.columns)
        return self

    def _scale(self, x: np.ndarray, col: str) -> np.ndarray | None:
        mean: float | None = self.stats_[f"mean({col})"]
        std: float | None = self.stats_[f"std({col})"]
        if mean is None or std is None:
            return None
        return (x - mean) / (1.0 if std < _EPSILON else std)


class MinMaxScaler(_ColumnScaler):
    """(x - min) / (max - min) per column; stats "min(x)", "max(x)"."""

    def _fit(self, ds: Any) -> Preprocessor:
        self._add_aggs(Min, self.columns)
        self._add_aggs(Max, self.columns)
        return self

    def _scale(self, x: np.ndarray, col: str) -> np.ndarray | None:
        lo: float | None = self.stats_[f"min({col})"]
        hi: float | None = self.stats_[f"max({col})"]
        if lo is None or hi is None:
            return None
        diff = hi - lo
        return (x - lo) / (1.0 if diff < _EPSILON else diff)


class MaxAbsScaler(_ColumnScaler):
    """x / max(|x|) per column; stats "abs_max(x)"."""

    def _fit(self, ds: Any) -> Preprocessor:
        self._add_aggs(AbsMax, self.columns)
        return self

    def _scale(self, x: np.ndarray, col: str) -> np.ndarray | None:
        m = self.stats_[f"abs_max({col})"]
        if m is None:
            return None
        return x / (1.0 if m == 0 else m)


class RobustScaler(_ColumnScaler):
    """(x - median) / (high quantile - low quantile) per column; stats "low_quantile(x)",
    "median(x)", "high_quantile(x)", from ApproximateQuantile as in Ray (exact in Ember, so
    quantile_precision has nothing to tune)."""

    def __init__(self, columns: list[str], quantile_range: tuple[float, float] = (0.25, 0.75),
                 output_columns: list[str] | None = None, quantile_precision: int = 800) -> None:
        super().__init__(columns, output_columns)
        lo, hi = quantile_range
        if not 0 <= lo <= hi <= 1:
            raise ValueError(f"quantile_range must be (low, high) with 0 <= low <= high <= 1, "
                             f"got {quantile_range}")
        self.quantile_range = (lo, hi)
        self.quantile_precision = quantile_precision

    def _fit(self, ds: Any) -> Preprocessor:
        lo, hi = self.quantile_range
        self._add_aggs(lambda c: ApproximateQuantile(c, [lo, 0.5, hi], self.quantile_precision),
                       self.columns)

        def split(_ds: Any) -> dict[str, Any]:
            out = {}
            for c in self.columns:
                qs = self.stats_.pop(f"approx_quantile({c})") or [None, None, None]
                out.update({f"low_quantile({c})": qs[0], f"median({c})": qs[1],
                            f"high_quantile({c})": qs[2]})
            return out

        self._add_stat(split)
        return self

    def _scale(self, x: np.ndarray, col: str) -> np.ndarray | None:
        lo: float | None = self.stats_[f"low_quantile({col})"]
        med: float | None = self.stats_[f"median({col})"]
        hi: float | None = self.stats_[f"high_quantile({col})"]
        if lo is None or med is None or hi is None:
            return None
        if hi - lo == 0:
            return np.zeros_like(x)
        return (x - med) / (hi - lo)
