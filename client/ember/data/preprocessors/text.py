"""Text features: Tokenizer, HashingVectorizer, CountVectorizer (Ray's outputs: token lists, and
per-row count vectors as list columns; a null document stays null)."""
from __future__ import annotations

import collections
import hashlib
from typing import Any, Callable

import pyarrow as pa

from ._base import Preprocessor, upsert
from ._base import output_columns as output_columns_of


def simple_split_tokenizer(value: str) -> list[str]:
    """Splits a string on single spaces (Ray's default tokenization_fn)."""
    return value.split(" ")


def simple_hash(value: object, num_features: int) -> int:
    """A stable bucket in [0, num_features) for a token (sha256 of its text, as Ray does, so
    hashed features agree with Ray's)."""
    return int(hashlib.sha256(str(value).encode()).hexdigest(), 16) % num_features


def _tokens(values: list[Any], fn: Callable[[str], list[str]]) -> list[list[str] | None]:
    return [None if v is None else fn(v) for v in values]


class Tokenizer(Preprocessor):
    """Each string replaced by its list of tokens (tokenization_fn, default split on spaces)."""

    _is_fittable = False

    def __init__(self, columns: list[str], tokenization_fn: Callable[[str], list[str]] | None = None,
                 output_columns: list[str] | None = None) -> None:
        super().__init__()
        self.columns = list(columns)
        self.tokenization_fn = tokenization_fn or simple_split_tokenizer
        self.output_columns = output_columns_of(self.columns, output_columns)

    def _transform_arrow(self, table: pa.Table) -> pa.Table:
        for col, out in zip(self.columns, self.output_columns, strict=True):
            table = upsert(table, out, pa.array(_tokens(table.column(col).to_pylist(),
                                                        self.tokenization_fn),
                                                pa.list_(pa.string())))
        return table


class HashingVectorizer(Preprocessor):
    """Each document as num_features token counts, a token counted in bucket
    simple_hash(token) (no fitting, no vocabulary)."""

    _is_fittable = False

    def __init__(self, columns: list[str], num_features: int,
                 tokenization_fn: Callable[[str], list[str]] | None = None, *,
                 output_columns: list[str] | None = None) -> None:
        super().__init__()
        if num_features < 1:
            raise ValueError(f"num_features must be >= 1, got {num_features}")
        self.columns = list(columns)
        self.num_features = num_features
        self.tokenization_fn = tokenization_fn or simple_split_tokenizer
        self.output_columns = output_columns_of(self.columns, output_columns)

    def _transform_arrow(self, table: pa.Table) -> pa.Table:
        for col, out in zip(self.columns, self.output_columns, strict=True):
            rows: list[list[int] | None] = []
            for toks in _tokens(table.column(col).to_pylist(), self.tokenization_fn):
                if toks is None:
                    rows.append(None)
                    continue
                vec = [0] * self.num_features
                for t in toks:
                    vec[simple_hash(t, self.num_features)] += 1
                rows.append(vec)
            table = upsert(table, out, pa.array(rows, pa.list_(pa.int64())))
        return table


class CountVectorizer(Preprocessor):
    """Each document as counts of the fitted vocabulary (most frequent first, at most
    max_features tokens; ties by token); stats "token_counts(col)"."""

    def __init__(self, columns: list[str], tokenization_fn: Callable[[str], list[str]] | None = None,
                 max_features: int | None = None, *,
                 output_columns: list[str] | None = None) -> None:
        super().__init__()
        self.columns = list(columns)
        self.tokenization_fn = tokenization_fn or simple_split_tokenizer
        self.max_features = max_features
        self.output_columns = output_columns_of(self.columns, output_columns)

    def _fit(self, ds: Any) -> Preprocessor:
        cols, fn = self.columns, self.tokenization_fn

        def counts(batch: pa.Table) -> pa.Table:
            out = {}
            for c in cols:
                ctr: collections.Counter[str] = collections.Counter()
                for toks in _tokens(batch.column(c).to_pylist(), fn):
                    if toks is not None:
                        ctr.update(toks)
                out[c] = [list(ctr.items())]
            return pa.table({c: pa.array(v, pa.list_(pa.struct([("t", pa.string()),
                                                                ("n", pa.int64())])))
                             for c, v in out.items()})

        def stat(_ds: Any) -> dict[str, Any]:
            total: dict[str, collections.Counter[str]] = {c: collections.Counter() for c in cols}
            for batch in _ds.map_batches(counts, batch_format="pyarrow").iter_batches(
                    batch_size=None, batch_format="pyarrow"):
                for c in cols:
                    for row in batch.column(c).to_pylist():
                        total[c].update({d["t"]: d["n"] for d in row})
            res = {}
            for c in cols:
                top = sorted(total[c].items(), key=lambda p: (-p[1], p[0]))[:self.max_features]
                res[f"token_counts({c})"] = collections.Counter(dict(top))
            return res

        self._add_stat(stat)
        return self

    def _transform_arrow(self, table: pa.Table) -> pa.Table:
        for col, out in zip(self.columns, self.output_columns, strict=True):
            vocab = [t for t, _ in sorted(self.stats_[f"token_counts({col})"].items(),
                                          key=lambda p: (-p[1], p[0]))]
            rows: list[list[int] | None] = []
            for toks in _tokens(table.column(col).to_pylist(), self.tokenization_fn):
                if toks is None:
                    rows.append(None)
                    continue
                ctr = collections.Counter(toks)
                rows.append([ctr.get(t, 0) for t in vocab])
            table = upsert(table, out, pa.array(rows, pa.list_(pa.int64())))
        return table


class FeatureHasher(Preprocessor):
    """Token-count columns folded into num_features buckets (a column's bucket is
    simple_hash(column name)), written as one vector column `output_column`."""

    _is_fittable = False

    def __init__(self, columns: list[str], num_features: int, output_column: str) -> None:
        super().__init__()
        if num_features < 1:
            raise ValueError(f"num_features must be >= 1, got {num_features}")
        self.columns = list(columns)
        self.num_features = num_features
        self.output_column = output_column

    def _transform_arrow(self, table: pa.Table) -> pa.Table:
        import numpy as np

        out = np.zeros((table.num_rows, self.num_features))
        for c in self.columns:
            vals = table.column(c).cast(pa.float64()).to_numpy(zero_copy_only=False)
            out[:, simple_hash(c, self.num_features)] += vals
        if all(pa.types.is_integer(table.column(c).type) for c in self.columns):
            return upsert(table, self.output_column,
                          pa.array(out.astype(np.int64).tolist(), pa.list_(pa.int64())))
        return upsert(table, self.output_column, pa.array(out.tolist(), pa.list_(pa.float64())))

    def get_output_columns(self) -> list[str]:
        """The one output column."""
        return [self.output_column]
