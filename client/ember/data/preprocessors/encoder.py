"""Categorical encoders: OrdinalEncoder, OneHotEncoder, LabelEncoder, Categorizer.

Fitting collects each column's distinct values (one `Unique` aggregation per column, plus a
`ValueCounter` where `max_categories` keeps only the most frequent); the values are sorted and
numbered, stored as stats_["unique_values(col)"] = {value: index}, as in Ray. A null in an
encoded column is refused at transform time, naming the column.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from ember.data.aggregate import Unique, ValueCounter

from ._base import Preprocessor, upsert
from ._base import output_columns as output_columns_of


def _key(v: Any) -> Any:
    return tuple(v) if isinstance(v, (list, np.ndarray)) else v


def _index(values: list[Any]) -> dict[Any, int]:
    vals = [v for v in values if v is not None]
    try:
        vals = sorted(vals)
    except TypeError:
        vals = sorted(vals, key=repr)
    return {v: i for i, v in enumerate(vals)}


def _check_nulls(table: pa.Table, columns: list[str]) -> None:
    bad = [c for c in columns if table.column(c).null_count]
    if bad:
        raise ValueError(f"Unable to transform columns {bad} because they contain null values. "
                         "Consider imputing missing values first.")


class _Encoder(Preprocessor):
    _flatten_lists = False

    def __init__(self, columns: list[str], output_columns: list[str] | None) -> None:
        super().__init__()
        self.columns = list(columns)
        self.output_columns = output_columns_of(self.columns, output_columns)

    def _fit(self, ds: Any) -> Preprocessor:
        self._add_aggs(lambda c: Unique(c, ignore_nulls=True, encode_lists=self._flatten_lists),
                       self.columns)
        self._add_stat(self._index_stats)
        return self

    def _index_stats(self, ds: Any) -> dict[str, Any]:
        out = {f"unique_values({c})": _index([_key(v) for v in self.stats_.pop(f"unique({c})")])
               for c in self.columns}
        return out

    def _codes(self, column: Any, col: str) -> pa.Array:
        """Each value's category index (null when unseen), vectorized for scalar columns."""
        idx = self.stats_[f"unique_values({col})"]
        t = column.type
        if not (pa.types.is_list(t) or pa.types.is_large_list(t) or
                pa.types.is_fixed_size_list(t) or pa.types.is_struct(t)):
            try:
                keys = pa.array(list(idx), type=t) if idx else pa.array([], type=t)
                return pc.index_in(column, value_set=keys)  # keys are in index order
            except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
                pass
        return pa.array([idx.get(_key(v)) for v in column.to_pylist()], type=pa.int32())


class OrdinalEncoder(_Encoder):
    """Each category replaced by its index among the sorted categories (lists: each element,
    unless encode_lists=False); an unseen category becomes null (NaN in pandas)."""

    def __init__(self, columns: list[str], *, encode_lists: bool = True,
                 output_columns: list[str] | None = None) -> None:
        super().__init__(columns, output_columns)
        self.encode_lists = encode_lists
        self._flatten_lists = encode_lists

    def _transform_arrow(self, table: pa.Table) -> pa.Table:
        _check_nulls(table, self.columns)
        for col, out in zip(self.columns, self.output_columns, strict=True):
            c = table.column(col)
            if (pa.types.is_list(c.type) or pa.types.is_large_list(c.type)) and self.encode_lists:
                idx = self.stats_[f"unique_values({col})"]
                codes: Any = [[idx.get(v) for v in row] for row in c.to_pylist()]
            else:
                codes = self._codes(c, col)
            table = upsert(table, out, codes if isinstance(codes, (pa.Array, pa.ChunkedArray))
                           else pa.array(codes))
        return table


class OneHotEncoder(_Encoder):
    """Each category as a fixed-size list of 0/1 (one slot per sorted category, as Ray 2.60
    writes it into the column); unseen or (with max_categories) infrequent values are all 0."""

    def __init__(self, columns: list[str], *, max_categories: dict[str, int] | None = None,
                 output_columns: list[str] | None = None) -> None:
        super().__init__(columns, output_columns)
        self.max_categories = dict(max_categories or {})
        extra = [c for c in self.max_categories if c not in self.columns]
        if extra:
            raise ValueError(f"You set `max_categories` for {extra}, which is not present in "
                             f"{self.columns}.")

    def _fit(self, ds: Any) -> Preprocessor:
        super()._fit(ds)
        self._add_aggs(ValueCounter, list(self.max_categories))
        return self

    def _index_stats(self, ds: Any) -> dict[str, Any]:
        out = super()._index_stats(ds)
        for c, k in self.max_categories.items():
            vc = self.stats_.pop(f"value_counter({c})")
            pairs = sorted(((n, _key(v)) for v, n in zip(vc["values"], vc["counts"], strict=True)
                            if v is not None), key=lambda p: -p[0])
            out[f"unique_values({c})"] = _index([v for _, v in pairs[:k]])
        return out

    def _transform_arrow(self, table: pa.Table) -> pa.Table:
        _check_nulls(table, self.columns)
        for col, out in zip(self.columns, self.output_columns, strict=True):
            n = len(self.stats_[f"unique_values({col})"])
            codes = pc.fill_null(self._codes(table.column(col), col), -1).to_numpy(
                zero_copy_only=False).astype(np.int64)
            hot = np.zeros((len(codes), n), dtype=np.uint8)
            ok = codes >= 0
            hot[np.flatnonzero(ok), codes[ok]] = 1
            table = upsert(table, out, pa.FixedSizeListArray.from_arrays(hot.ravel(), n))
        return table


class LabelEncoder(_Encoder):
    """The label column's classes replaced by their index among the sorted classes."""

    def __init__(self, label_column: str, *, output_column: str | None = None) -> None:
        super().__init__([label_column], None if output_column is None else [output_column])
        self.label_column = label_column
        self.output_column = output_column or label_column

    def _transform_arrow(self, table: pa.Table) -> pa.Table:
        _check_nulls(table, self.columns)
        return upsert(table, self.output_column,
                      self._codes(table.column(self.label_column), self.label_column))

    def inverse_transform_batch(self, data: Any) -> Any:
        """Indices back to the class labels (a DataFrame or dict batch)."""
        inv = {i: v for v, i in self.stats_[f"unique_values({self.label_column})"].items()}
        df = data if isinstance(data, pd.DataFrame) else pd.DataFrame(data)
        df = df.copy()
        df[self.label_column] = [inv.get(i) for i in df[self.output_column]]
        return df


class Categorizer(_Encoder):
    """Columns as pandas categoricals (Arrow dictionary columns), with the fitted sorted
    categories or the given `dtypes`."""

    def __init__(self, columns: list[str], dtypes: dict[str, pd.CategoricalDtype] | None = None,
                 output_columns: list[str] | None = None) -> None:
        super().__init__(columns, output_columns)
        self.dtypes = dict(dtypes or {})

    def _fit(self, ds: Any) -> Preprocessor:
        todo = [c for c in self.columns if c not in self.dtypes]
        self._add_aggs(lambda c: Unique(c, ignore_nulls=True), todo)

        def dtypes(_ds: Any) -> dict[str, Any]:
            for c in todo:
                self.dtypes[c] = pd.CategoricalDtype(list(_index(self.stats_[f"unique({c})"])))
            return {}

        self._add_stat(dtypes)
        return self

    def _transform_pandas(self, df: pd.DataFrame) -> pd.DataFrame:
        for col, out in zip(self.columns, self.output_columns, strict=True):
            df[out] = df[col].astype(self.dtypes[col])
        return df


class _FlatValueCounter(ValueCounter):
    """ValueCounter over the elements of a list column."""

    def aggregate_block(self, block: pa.Table) -> Any:
        col = block.column(self.get_target_column() or "")
        if pa.types.is_list(col.type) or pa.types.is_large_list(col.type):
            col = pc.list_flatten(col)
        return super().aggregate_block(pa.table({self.get_target_column() or "": col}))


class MultiHotEncoder(OneHotEncoder):
    """A list column as counts of each sorted category (one slot per category found in any
    list); max_categories keeps the most frequent elements."""

    _flatten_lists = True

    def _fit(self, ds: Any) -> Preprocessor:
        Preprocessor._fit(self, ds)
        self._add_aggs(lambda c: Unique(c, ignore_nulls=True, encode_lists=True), self.columns)
        self._add_aggs(_FlatValueCounter, list(self.max_categories))
        self._add_stat(self._index_stats)
        return self

    def _transform_arrow(self, table: pa.Table) -> pa.Table:
        _check_nulls(table, self.columns)
        for col, out in zip(self.columns, self.output_columns, strict=True):
            idx = self.stats_[f"unique_values({col})"]
            rows = []
            for v in table.column(col).to_pylist():
                counts = [0] * len(idx)
                for x in (v if isinstance(v, list) else [v]):
                    i = idx.get(_key(x))
                    if i is not None:
                        counts[i] += 1
                rows.append(counts)
            table = upsert(table, out, pa.array(rows, pa.list_(pa.int64())))
        return table
