"""Preprocessor: the base of Ember's `ray.data.preprocessors` — fit stats on a Dataset, then
transform Datasets (map_batches tasks) or single batches.

A subclass declares the statistics it needs in `_fit` (aggregations from ember.data.aggregate,
named as Ray names them, e.g. "mean(x)"); `fit` runs all of them in ONE `Dataset.aggregate`
pass and stores the results in `stats_`. `_transform_arrow(table)` or `_transform_pandas(df)`
does the per-batch work; transform_batch accepts a dict of numpy arrays, a DataFrame or a
pyarrow Table and answers in the same format.
"""
from __future__ import annotations

import base64
import enum
import pickle
import warnings
from typing import Any, Callable

import numpy as np
import pandas as pd
import pyarrow as pa

__all__ = ["Preprocessor", "PreprocessorNotFittedException"]


class PreprocessorNotFittedException(RuntimeError):
    """transform() was called before fit()."""


class Preprocessor:
    """Base class: `fit(ds)`, `transform(ds)`, `fit_transform(ds)`, `transform_batch(batch)`."""

    class FitStatus(str, enum.Enum):
        """Whether a preprocessor needs fitting and has been fitted."""

        NOT_FITTABLE = "NOT_FITTABLE"
        NOT_FITTED = "NOT_FITTED"
        PARTIALLY_FITTED = "PARTIALLY_FITTED"
        FITTED = "FITTED"

    _is_fittable = True

    def __init__(self) -> None:
        self.stats_: dict[str, Any] = {}
        self._aggs: list[Any] = []
        self._callables: list[Callable[[Any], dict[str, Any]]] = []
        self._fitted = False

    # --- fitting -----------------------------------------------------------------------------
    def _add_aggs(self, make: Callable[[str], Any], columns: list[str]) -> None:
        """Asks for aggregation make(col) per column; its result lands in stats_[agg.name]."""
        self._aggs.extend(make(c) for c in columns)

    def _add_stat(self, fn: Callable[[Any], dict[str, Any]]) -> None:
        """Asks for a stat computed by fn(dataset) -> {key: value} (besides the one pass)."""
        self._callables.append(fn)

    def _fit(self, ds: Any) -> Preprocessor:
        """Declares the statistics this preprocessor needs (subclasses)."""
        return self

    def fit_status(self) -> Preprocessor.FitStatus:
        """NOT_FITTABLE, NOT_FITTED or FITTED."""
        if not self._is_fittable:
            return Preprocessor.FitStatus.NOT_FITTABLE
        return Preprocessor.FitStatus.FITTED if self._fitted else Preprocessor.FitStatus.NOT_FITTED

    def fit(self, ds: Any) -> Preprocessor:
        """Computes the fitted state on `ds` (all declared aggregations in one pass)."""
        status = self.fit_status()
        if status is Preprocessor.FitStatus.NOT_FITTABLE:
            return self
        if status is not Preprocessor.FitStatus.NOT_FITTED:
            warnings.warn("`fit` has already been called on the preprocessor; its fitted state "
                          "is overwritten", UserWarning, stacklevel=2)
        self._aggs, self._callables, self.stats_ = [], [], {}
        self._fit(ds)
        missing = [c for c in getattr(self, "columns", []) or []
                   if (s := ds.schema()) is not None and c not in s.names]
        if missing:
            raise ValueError(f"{type(self).__name__}: column(s) {missing} not in the dataset")
        if self._aggs:
            self.stats_.update(ds.aggregate(*self._aggs))
        for fn in self._callables:
            self.stats_.update(fn(ds))
        self._aggs, self._callables = [], []
        self._fitted = True
        return self

    def fit_transform(self, ds: Any, *, transform_num_cpus: float | None = None,
                      transform_memory: float | None = None,
                      transform_batch_size: int | None = None,
                      transform_concurrency: int | None = None) -> Any:
        """fit(ds) then transform(ds)."""
        self.fit(ds)
        return self.transform(ds, batch_size=transform_batch_size, num_cpus=transform_num_cpus,
                              memory=transform_memory, concurrency=transform_concurrency)

    # --- transforming ------------------------------------------------------------------------
    def _check_fitted(self) -> None:
        if self.fit_status() in (Preprocessor.FitStatus.NOT_FITTED,
                                 Preprocessor.FitStatus.PARTIALLY_FITTED):
            raise PreprocessorNotFittedException(
                "`fit` must be called before `transform`, or use fit_transform()")

    def transform(self, ds: Any, *, batch_size: int | None = None, num_cpus: float | None = None,
                  memory: float | None = None, concurrency: int | None = None) -> Any:
        """A Dataset with this preprocessor applied to every batch (lazy)."""
        self._check_fitted()
        fn = self._transform_table
        return ds.map_batches(fn, batch_format="pyarrow", batch_size=batch_size,
                              num_cpus=num_cpus, memory=memory, concurrency=concurrency,
                              zero_copy_batch=False)

    def transform_batch(self, data: Any) -> Any:
        """One batch transformed, in the format it came in (dict of numpy arrays, pandas
        DataFrame or pyarrow Table)."""
        from ember.data import block as B

        self._check_fitted()
        if isinstance(data, pa.Table):
            return self._transform_table(data)
        if isinstance(data, pd.DataFrame):
            return B.block_to_pandas(self._transform_table(B.pandas_to_block(data)))
        if isinstance(data, dict):
            return B.block_to_batch(self._transform_table(B.to_block(data)), "numpy")
        raise TypeError(f"transform_batch() takes a dict of numpy arrays, a pandas DataFrame or "
                        f"a pyarrow Table, got {type(data).__name__}")

    def _transform_table(self, table: pa.Table) -> pa.Table:
        if type(self)._transform_arrow is not Preprocessor._transform_arrow:
            return self._transform_arrow(table)
        from ember.data import block as B

        return B.pandas_to_block(self._transform_pandas(B.block_to_pandas(table)))

    def _transform_arrow(self, table: pa.Table) -> pa.Table:
        """Transforms an Arrow batch (subclasses define this or _transform_pandas)."""
        raise NotImplementedError

    def _transform_pandas(self, df: pd.DataFrame) -> pd.DataFrame:
        """Transforms a pandas batch."""
        raise NotImplementedError

    # --- serialization -----------------------------------------------------------------------
    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_aggs"], state["_callables"] = [], []
        return state

    def serialize(self) -> str:
        """This preprocessor (with its fitted state) as a string (pickle, base64)."""
        return base64.b64encode(pickle.dumps(self)).decode("ascii")

    @staticmethod
    def deserialize(serialized: str | bytes) -> Preprocessor:
        """The preprocessor a `serialize()` string (or a pickle of one) describes."""
        if isinstance(serialized, bytes) and serialized[:1] == b"\x80":  # a raw pickle
            raw = serialized
        else:
            try:
                raw = base64.b64decode(serialized, validate=True)
            except (ValueError, TypeError):
                raise ValueError("not a serialized preprocessor (expected what serialize() "
                                 "returns)") from None
        obj = pickle.loads(raw)
        if not isinstance(obj, Preprocessor):
            raise TypeError(f"the serialized data is a {type(obj).__name__}, not a Preprocessor")
        return obj

    def get_input_columns(self) -> list[str]:
        """The columns this preprocessor reads."""
        return list(getattr(self, "columns", []) or [])

    def get_output_columns(self) -> list[str]:
        """The columns this preprocessor writes."""
        return list(getattr(self, "output_columns", []) or self.get_input_columns())

    def __repr__(self) -> str:
        cols = getattr(self, "columns", None)
        return f"{type(self).__name__}(columns={cols!r})"


def output_columns(columns: list[str], output: list[str] | None) -> list[str]:
    """Ray's rule: output columns default to the input columns; otherwise one per input."""
    if output is None:
        return list(columns)
    if len(output) != len(columns):
        raise ValueError(f"output_columns must have one name per column: {len(columns)} columns "
                         f"but {len(output)} output_columns")
    return list(output)


def upsert(table: pa.Table, name: str, values: Any) -> pa.Table:
    """table with column `name` set to values (replaced in place or appended)."""
    arr = values if isinstance(values, (pa.Array, pa.ChunkedArray)) else pa.array(values)
    if name in table.column_names:
        return table.set_column(table.column_names.index(name), name, arr)
    return table.append_column(name, arr)


def as_float(table: pa.Table, name: str) -> np.ndarray:
    """A column as float64 numpy (nulls as NaN)."""
    out: np.ndarray = table.column(name).cast(pa.float64()).to_numpy(zero_copy_only=False)
    return out
