"""SimpleImputer: fills nulls (and NaN) with the column mean, the most frequent value, or a
constant (Ray's strategies and stats names: "mean(x)", "most_frequent(x)")."""
from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from ember.data.aggregate import Mean, ValueCounter

from ._base import Preprocessor, upsert
from ._base import output_columns as output_columns_of

_STRATEGIES = ("mean", "most_frequent", "constant")


class SimpleImputer(Preprocessor):
    """Replaces missing values per column by strategy "mean", "most_frequent" or "constant"
    (with fill_value)."""

    def __init__(self, columns: list[str], strategy: str = "mean", fill_value: Any = None, *,
                 output_columns: list[str] | None = None) -> None:
        super().__init__()
        if strategy not in _STRATEGIES:
            raise ValueError(f"Strategy {strategy} is not supported. Supported values are: "
                             f"{list(_STRATEGIES)}")
        if strategy == "constant":
            if fill_value is None:
                raise ValueError('`fill_value` must be set when using "constant" strategy.')
            self._is_fittable = False
        self.columns = list(columns)
        self.strategy = strategy
        self.fill_value = fill_value
        self.output_columns = output_columns_of(self.columns, output_columns)

    def _fit(self, ds: Any) -> Preprocessor:
        if self.strategy == "mean":
            self._add_aggs(Mean, self.columns)
        else:
            self._add_aggs(ValueCounter, self.columns)

            def most_frequent(_ds: Any) -> dict[str, Any]:
                out = {}
                for c in self.columns:
                    vc = self.stats_.pop(f"value_counter({c})")
                    pairs = [(n, v) for v, n in zip(vc["values"], vc["counts"], strict=True)
                             if v is not None]
                    out[f"most_frequent({c})"] = max(pairs, key=lambda p: p[0])[1] if pairs \
                        else None
                return out

            self._add_stat(most_frequent)
        return self

    def _transform_arrow(self, table: pa.Table) -> pa.Table:
        for col, out in zip(self.columns, self.output_columns, strict=True):
            if self.strategy == "constant":
                value = self.fill_value
            else:
                value = self.stats_[f"{self.strategy}({col})"]
            c = table.column(col) if col in table.column_names else \
                pa.nulls(table.num_rows, pa.array([value]).type)
            if pa.types.is_floating(c.type):
                c = pc.if_else(pc.is_nan(c), pa.scalar(None, c.type), c)
            if value is not None:
                t = pa.float64() if pa.types.is_integer(c.type) and isinstance(value, float) \
                    else c.type
                c = pc.fill_null(c.cast(t), pa.scalar(value).cast(t))
            table = upsert(table, out, c)
        return table
