"""Row and value transforms: Normalizer (rows to unit norm across columns), PowerTransformer
(Yeo-Johnson or Box-Cox with a given power), Concatenator (columns into one vector column)."""
from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pyarrow as pa

from ._base import Preprocessor, as_float, upsert
from ._base import output_columns as output_columns_of

# missing values are skipped in a row's norm (as pandas sums skip NaN)
_NORMS = {"l1": lambda m: np.nansum(np.abs(m), axis=1),
          "l2": lambda m: np.sqrt(np.nansum(m ** 2, axis=1)),
          "max": lambda m: np.nanmax(np.abs(m), axis=1)}


class Normalizer(Preprocessor):
    """Each row of `columns` divided by its norm ("l1", "l2" or "max")."""

    _is_fittable = False

    def __init__(self, columns: list[str], norm: str = "l2", *,
                 output_columns: list[str] | None = None) -> None:
        super().__init__()
        if norm not in _NORMS:
            raise ValueError(f"Norm {norm} is not supported. Supported values are: {list(_NORMS)}")
        self.columns = list(columns)
        self.norm = norm
        self.output_columns = output_columns_of(self.columns, output_columns)

    def _transform_arrow(self, table: pa.Table) -> pa.Table:
        m = np.column_stack([as_float(table, c) for c in self.columns])
        with np.errstate(divide="ignore", invalid="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # an all-missing row: NaN norm
            scaled = m / _NORMS[self.norm](m)[:, None]
        for i, out in enumerate(self.output_columns):
            table = upsert(table, out, pa.array(scaled[:, i]))
        return table


class PowerTransformer(Preprocessor):
    """Yeo-Johnson (any sign) or Box-Cox (positive values) with a fixed `power`."""

    _is_fittable = False

    def __init__(self, columns: list[str], power: float, method: str = "yeo-johnson", *,
                 output_columns: list[str] | None = None) -> None:
        super().__init__()
        if method not in ("yeo-johnson", "box-cox"):
            raise ValueError(f"Method {method} is not supported. Supported values are: "
                             "['yeo-johnson', 'box-cox']")
        self.columns = list(columns)
        self.power = power
        self.method = method
        self.output_columns = output_columns_of(self.columns, output_columns)

    def _apply(self, x: np.ndarray) -> np.ndarray:
        p = self.power
        if self.method == "box-cox":
            boxcox: np.ndarray = np.log(x) if p == 0 else (np.power(x, p) - 1) / p
            return boxcox
        out = np.full_like(x, np.nan)
        pos = x >= 0
        neg = x < 0
        out[pos] = np.log1p(x[pos]) if p == 0 else (np.power(x[pos] + 1, p) - 1) / p
        out[neg] = -np.log1p(-x[neg]) if p == 2 else \
            -(np.power(1 - x[neg], 2 - p) - 1) / (2 - p)
        return out

    def _transform_arrow(self, table: pa.Table) -> pa.Table:
        for col, out in zip(self.columns, self.output_columns, strict=True):
            with np.errstate(divide="ignore", invalid="ignore"):
                table = upsert(table, out, pa.array(self._apply(as_float(table, col))))
        return table


class Concatenator(Preprocessor):
    """`columns` stacked into one vector column `output_column_name` (the inputs dropped);
    flatten=True joins list/array values end to end."""

    _is_fittable = False

    def __init__(self, columns: list[str], output_column_name: str = "concat_out",
                 dtype: Any = None, raise_if_missing: bool = False, flatten: bool = False) -> None:
        super().__init__()
        self.columns = list(columns)
        self.output_column_name = output_column_name
        self.dtype = dtype
        self.raise_if_missing = raise_if_missing
        self.flatten = flatten

    def _transform_arrow(self, table: pa.Table) -> pa.Table:
        missing = [c for c in self.columns if c not in table.column_names]
        if missing:
            if self.raise_if_missing:
                raise ValueError(f"Missing columns specified in '{self.columns}': {missing}")
            raise ValueError(f"Concatenator: no column(s) {missing} in the batch")
        from ember.data import block as B

        parts = [B.column_to_numpy(table.column(c), zero_copy=False) for c in self.columns]
        if self.flatten:
            rows = [np.concatenate([np.atleast_1d(np.asarray(p[i])) for p in parts])
                    for i in range(table.num_rows)]
            mat = np.stack(rows) if rows else np.zeros((0, 0))
        else:
            mat = np.column_stack(parts) if parts else np.zeros((table.num_rows, 0))
        if self.dtype is not None:
            mat = mat.astype(self.dtype)
        table = table.drop_columns(self.columns)
        return upsert(table, self.output_column_name, B.column_to_arrow(np.ascontiguousarray(mat)))

    def get_output_columns(self) -> list[str]:
        """The one output column."""
        return [self.output_column_name]
