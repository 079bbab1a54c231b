"""Binning: CustomKBinsDiscretizer (given edges) and UniformKBinsDiscretizer (k equal-width
bins between each column's fitted min and max, widened by 0.1% as pandas' cut does). Values
become bin indices (or the categories of a given CategoricalDtype), through pandas.cut."""
from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from ember.data.aggregate import Max, Min

from ._base import Preprocessor
from ._base import output_columns as output_columns_of


class _KBins(Preprocessor):
    def __init__(self, columns: list[str], bins: Any, *, right: bool = True,
                 include_lowest: bool = False, duplicates: str = "raise",
                 dtypes: dict[str, Any] | None = None,
                 output_columns: list[str] | None = None) -> None:
        super().__init__()
        self.columns = list(columns)
        self.bins = bins
        self.right = right
        self.include_lowest = include_lowest
        self.duplicates = duplicates
        self.dtypes = dtypes
        self.output_columns = output_columns_of(self.columns, output_columns)
        if isinstance(bins, dict) and not all(c in bins for c in self.columns):
            raise ValueError("If `bins` is a dictionary, all elements of `columns` must be "
                             "present in it.")

    def _edges(self, col: str) -> Any:
        b = self.stats_ if self._is_fittable else self.bins
        return b[col] if isinstance(b, dict) else b

    def _transform_pandas(self, df: pd.DataFrame) -> pd.DataFrame:
        for col, out in zip(self.columns, self.output_columns, strict=True):
            labels: Any = False
            ordered = True
            dtype = (self.dtypes or {}).get(col)
            if isinstance(dtype, pd.CategoricalDtype):
                labels, ordered = list(dtype.categories), dtype.ordered
            df[out] = pd.cut(df[col], self._edges(col), right=self.right, labels=labels,
                             ordered=ordered, include_lowest=self.include_lowest,
                             duplicates=self.duplicates)
        return df


class CustomKBinsDiscretizer(_KBins):
    """Bins with the given edges (one list for all columns, or a dict per column)."""

    _is_fittable = False


class UniformKBinsDiscretizer(_KBins):
    """`bins` equal-width bins per column (an int, or a dict of ints per column) between the
    fitted min and max; stats_[col] holds the edges."""

    def _fit(self, ds: Any) -> Preprocessor:
        cols = list(self.bins) if isinstance(self.bins, dict) else self.columns
        for c in cols:
            if not isinstance(self.bins[c] if isinstance(self.bins, dict) else self.bins, int):
                raise TypeError(f"`bins` must be an integer or a dict of integers, got "
                                f"{self.bins}")
        self._add_aggs(Min, cols)
        self._add_aggs(Max, cols)

        def edges(_ds: Any) -> dict[str, Any]:
            out = {}
            for c in cols:
                lo, hi = self.stats_.pop(f"min({c})"), self.stats_.pop(f"max({c})")
                if lo is None or hi is None:
                    raise ValueError(f"Column {c} has no values to bin. Check the data used "
                                     "to fit the discretizer.")
                k = self.bins[c] if isinstance(self.bins, dict) else self.bins
                out[c] = _uniform_edges(float(lo), float(hi), k, self.right)
            return out

        self._add_stat(edges)
        return self


def _uniform_edges(lo: float, hi: float, k: int, right: bool) -> np.ndarray:
    """k + 1 edges from lo to hi; the outer edge on the closed side moves out by 0.1% of the
    range (or by 0.1% of the value when lo == hi), so that lo and hi fall in a bin."""
    if np.isinf(lo) or np.isinf(hi):
        raise ValueError("Cannot specify integer `bins` when input data contains infinity.")
    if lo == hi:
        lo -= 0.001 * abs(lo) if lo != 0 else 0.001
        hi += 0.001 * abs(hi) if hi != 0 else 0.001
        return np.linspace(lo, hi, k + 1)
    edges = np.linspace(lo, hi, k + 1)
    pad = (hi - lo) * 0.001
    if right:
        edges[0] -= pad
    else:
        edges[-1] += pad
    return edges
