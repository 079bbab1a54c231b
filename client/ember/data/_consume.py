"""Consumption methods of Dataset: take, count, aggregates, schema, iteration, splits."""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Iterator

import numpy as np
import pyarrow as pa

import ember

from . import block as B
from ._internal import plan as P

if TYPE_CHECKING:
    from .dataset import Dataset, MaterializedDataset
    from .iterator import DataIterator


class Schema:
    """Column names and types of a dataset (Ray's Schema)."""

    def __init__(self, base: pa.Schema) -> None:
        self.base_schema = base
        self.names = list(base.names)
        self.types = list(base.types)

    def __repr__(self) -> str:
        w = max((len(n) for n in self.names), default=6)
        lines = ["Column" + " " * (w - 4) + "Type", "------" + " " * (w - 4) + "----"]
        lines += [f"{n}{' ' * (w - len(n) + 2)}{t}" for n, t in zip(self.names, self.types, strict=False)]
        return "\n".join(lines)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Schema) and other.base_schema == self.base_schema


class ConsumeMixin:
    """Methods that execute the plan."""

    _plan: P.LogicalOp
    _last_stats: Any

    if TYPE_CHECKING:  # Dataset's own methods, which these call
        def limit(self, limit: int) -> Dataset: ...
        def map_batches(self, fn: Any, **kwargs: Any) -> Dataset: ...
        def random_shuffle(self, **kwargs: Any) -> Dataset: ...

    def _iter_bundles(self) -> Iterator[Any]:  # pragma: no cover - in Dataset
        raise NotImplementedError

    # --- materializing ------------------------------------------------------------------------
    def materialize(self) -> MaterializedDataset:
        """Executes the plan and keeps the blocks in the object store."""
        from .dataset import MaterializedDataset

        bundles = list(self._iter_bundles())
        md = MaterializedDataset(P.InputData(name="InputData", inputs=[], bundles=bundles))
        md._last_stats = self._last_stats
        return md

    def _bundles(self) -> list[Any]:
        if isinstance(self._plan, P.InputData):
            return list(self._plan.bundles)
        return list(self._iter_bundles())

    def to_arrow_refs(self) -> list[Any]:
        """ObjectRefs of the Arrow blocks."""
        return [b.ref for b in self._bundles()]

    def num_blocks(self) -> int:
        """Number of blocks (executes the plan unless materialized)."""
        return len(self._bundles())

    def size_bytes(self) -> int:
        """In-memory size of all blocks."""
        return sum(b.size_bytes for b in self._bundles())

    def count(self) -> int:
        """Number of rows: from metadata when possible (parquet footers, materialized data)."""
        p = self._plan
        if isinstance(p, P.InputData):
            return sum(b.num_rows for b in p.bundles)
        if isinstance(p, P.Read) and p.filter is None and hasattr(p.datasource, "num_rows"):
            n = p.datasource.num_rows()
            if n is not None:
                return int(n)
        return sum(b.num_rows for b in self._iter_bundles())

    def schema(self, fetch_if_missing: bool = True) -> Schema | None:
        """The schema (from parquet metadata, else from the first non-empty block)."""
        p = self._plan
        if isinstance(p, P.Read) and p.columns is None and hasattr(p.datasource, "schema") \
                and not p.datasource.include_paths:
            return Schema(p.datasource.schema())
        for b in self._iter_bundles() if not isinstance(p, P.InputData) else p.bundles:
            if b.meta.schema is not None and len(b.meta.schema):
                return Schema(b.meta.schema)
        return None

    def columns(self, fetch_if_missing: bool = True) -> list[str] | None:
        """Column names."""
        s = self.schema()
        return s.names if s is not None else None

    def stats(self) -> str:
        """Per-operator statistics of the last execution (wall/CPU time, rows, bytes, memory)."""
        return self._last_stats.to_summary() if self._last_stats is not None else ""

    # --- iteration ----------------------------------------------------------------------------
    def iterator(self) -> DataIterator:
        """A DataIterator over this dataset."""
        from .iterator import DataIterator

        return DataIterator(self._iter_bundles, self.stats, getattr(self, "_uuid", "dataset"))

    def iter_batches(self, **kwargs: Any) -> Iterator[Any]:
        """Batches (see DataIterator.iter_batches)."""
        return self.iterator().iter_batches(**kwargs)

    def iter_torch_batches(self, **kwargs: Any) -> Iterator[Any]:
        """Batches of torch tensors (see DataIterator.iter_torch_batches)."""
        return self.iterator().iter_torch_batches(**kwargs)

    def iter_rows(self, **kwargs: Any) -> Iterator[dict[str, Any]]:
        """Rows as dicts."""
        return self.iterator().iter_rows(**kwargs)

    def take(self, limit: int = 20) -> list[dict[str, Any]]:
        """The first `limit` rows."""
        return list(self.limit(limit).iter_rows())

    def take_all(self, limit: int | None = None) -> list[dict[str, Any]]:
        """Every row (ValueError past `limit` rows)."""
        rows = list(self.iter_rows())
        if limit is not None and len(rows) > limit:
            raise ValueError(f"the dataset has more than the given limit of {limit} rows")
        return rows

    def take_batch(self, batch_size: int = 20, *, batch_format: str | None = "default") -> Any:
        """The first batch_size rows as one batch."""
        for batch in self.limit(batch_size).iter_batches(
                batch_size=batch_size, batch_format=batch_format):
            return batch
        raise ValueError("the dataset is empty")

    def show(self, limit: int = 20) -> None:
        """Prints the first rows."""
        for row in self.take(limit):
            print(row)

    def to_pandas(self, limit: int | None = None) -> Any:
        """All rows as one pandas DataFrame."""
        blocks = [ember.get(b.ref) for b in self._bundles()]
        tbl = B.concat(blocks)
        if limit is not None and tbl.num_rows > limit:
            raise ValueError(f"the dataset has more than the given limit of {limit} rows")
        return B.block_to_pandas(tbl)

    def to_arrow(self) -> pa.Table:
        """All rows as one Arrow table."""
        return B.concat([ember.get(b.ref) for b in self._bundles()])

    # --- global aggregates --------------------------------------------------------------------
    def aggregate(self, *aggs: Any) -> dict[str, Any]:
        """Applies ember.data.aggregate aggregations to all rows: {name: value}, e.g.
        `ds.aggregate(Sum("x"), Mean("y"))` -> {"sum(x)": ..., "mean(y)": ...}. One partial per
        block in map tasks, merged and finalized here; None for a dataset without rows."""
        import pickle

        from ._internal import aggregation as A

        A.validate(aggs, None)
        agg_list = list(aggs)

        def partial(t: pa.Table) -> pa.Table:
            return A.partial_table(t, agg_list)

        partial.__name__ = "Aggregate"
        ds = self.map_batches(partial, batch_format="pyarrow", batch_size=None)
        parts = [pickle.loads(r[A.PARTIAL_COLUMN]) for r in ds.iter_rows()]
        self._last_stats = ds._last_stats
        return A.merge_partials(agg_list, parts)

    def _partials(self, cols: list[str]) -> list[dict[str, Any]]:
        def part(t: pa.Table) -> pa.Table:
            import pyarrow.compute as pc

            out: dict[str, list[Any]] = {}
            for c in cols:
                if c not in t.column_names:
                    raise KeyError(f"no column {c!r} in {t.column_names}")
                arr = t.column(c)
                valid = arr.drop_null()
                n = len(valid)
                x = valid.to_numpy(zero_copy_only=False).astype(np.float64) if n else np.array([])
                mean = float(x.mean()) if n else 0.0
                out[f"{c}.n"] = [n]
                out[f"{c}.nulls"] = [arr.null_count]
                out[f"{c}.sum"] = [pc.sum(valid).as_py() if n else None]
                out[f"{c}.min"] = [pc.min(valid).as_py() if n else None]
                out[f"{c}.max"] = [pc.max(valid).as_py() if n else None]
                out[f"{c}.mean"] = [mean]
                out[f"{c}.m2"] = [float(((x - mean) ** 2).sum()) if n else 0.0]
            return pa.table(out)

        part.__name__ = "aggregate"
        ds = self.map_batches(part, batch_format="pyarrow", batch_size=None)
        return ds.take_all()

    def _agg(self, kind: str, on: Any, ignore_nulls: bool = True, ddof: int = 1) -> Any:
        cols = [on] if isinstance(on, str) else list(on) if on is not None else None
        if cols is None:
            s = self.schema()
            cols = [n for n, t in zip(s.names, s.types, strict=False) if pa.types.is_integer(t) or
                    pa.types.is_floating(t)] if s else []
        parts = self._partials(cols)
        res: dict[str, Any] = {}
        for c in cols:
            ps = [p for p in parts if p[f"{c}.n"]]
            nulls = sum(p[f"{c}.nulls"] for p in parts)
            if not ps or (nulls and not ignore_nulls):
                res[c] = None
                continue
            if kind == "sum":
                res[c] = sum(p[f"{c}.sum"] for p in ps)
            elif kind == "min":
                res[c] = min(p[f"{c}.min"] for p in ps)
            elif kind == "max":
                res[c] = max(p[f"{c}.max"] for p in ps)
            else:
                n, mean, m2 = 0, 0.0, 0.0
                for p in ps:  # Chan et al. merge of (count, mean, M2)
                    nb, mb, m2b = p[f"{c}.n"], p[f"{c}.mean"], p[f"{c}.m2"]
                    d = mb - mean
                    tot = n + nb
                    mean += d * nb / tot
                    m2 += m2b + d * d * n * nb / tot
                    n = tot
                if kind == "mean":
                    res[c] = mean
                else:
                    res[c] = math.sqrt(m2 / (n - ddof)) if n - ddof > 0 else 0.0
        if isinstance(on, str):
            return res[on]
        return {f"{kind}({c})": v for c, v in res.items()}

    def sum(self, on: Any = None, ignore_nulls: bool = True) -> Any:
        """Sum of a column (or a dict per column)."""
        return self._agg("sum", on, ignore_nulls)

    def min(self, on: Any = None, ignore_nulls: bool = True) -> Any:
        """Minimum of a column."""
        return self._agg("min", on, ignore_nulls)

    def max(self, on: Any = None, ignore_nulls: bool = True) -> Any:
        """Maximum of a column."""
        return self._agg("max", on, ignore_nulls)

    def mean(self, on: Any = None, ignore_nulls: bool = True) -> Any:
        """Mean of a column."""
        return self._agg("mean", on, ignore_nulls)

    def std(self, on: Any = None, ddof: int = 1, ignore_nulls: bool = True) -> Any:
        """Standard deviation of a column (ddof=1 as in Ray)."""
        return self._agg("std", on, ignore_nulls, ddof)

    def unique(self, column: str, ignore_nulls: bool = False) -> list[Any]:
        """Distinct values of a column."""
        def uniq(t: pa.Table) -> pa.Table:
            import pyarrow.compute as pc

            return pa.table({"v": pc.unique(t.column(column))})

        uniq.__name__ = "unique"
        vals = self.map_batches(uniq, batch_format="pyarrow", batch_size=None)
        seen: dict[Any, None] = {}
        for r in vals.iter_rows():
            v = r["v"]
            if v is None and ignore_nulls:
                continue
            seen.setdefault(v, None)
        return list(seen)

    # --- splits -------------------------------------------------------------------------------
    def split_at_indices(self, indices: list[int]) -> list[MaterializedDataset]:
        """Materialized datasets cut at the given row indexes."""
        from ._internal.sizing import slices_at
        from ._internal.tasks import slice_task
        from .dataset import MaterializedDataset

        if any(i < 0 for i in indices):
            raise ValueError(f"indices must be >= 0, got {indices}")
        if list(indices) != sorted(indices):
            raise ValueError(f"indices must be sorted ascending, got {indices}")
        bundles = self._bundles()
        parts = slices_at([b.num_rows for b in bundles], indices)
        out = []
        from ._internal.operators import RefBundle

        for part in parts:
            new = []
            for bi, off, rows in part:
                b = bundles[bi]
                if off == 0 and rows == b.num_rows:
                    new.append(b)
                else:
                    ref, meta_ref = slice_task.remote([(off, rows)], b.ref)
                    new.append(RefBundle(ref, ember.get(meta_ref)))
            out.append(MaterializedDataset(P.InputData(name="InputData", inputs=[], bundles=new)))
        return out

    def split_proportionately(self, proportions: list[float]) -> list[MaterializedDataset]:
        """len(proportions) + 1 materialized datasets: the first ones hold those shares of the
        rows (rounded down, each at least one row), the last the rest."""
        if len(proportions) < 1:
            raise ValueError("proportions must be at least of length 1")
        if sum(proportions) >= 1:
            raise ValueError("proportions must sum to less than 1")
        if any(p <= 0 for p in proportions):
            raise ValueError("proportions must be bigger than 0")
        md = self.materialize()
        total = md.count()
        cuts = [int(total * c) for c in np.cumsum(proportions)]
        shift = 0  # walking back from the last cut, pull equal cuts apart so no split is empty
        for i in range(len(cuts) - 2, -1, -1):
            cuts[i] -= shift
            if cuts[i] == cuts[i + 1]:
                shift += 1
                cuts[i] -= 1
        if any(c <= 0 for c in cuts):
            raise ValueError("Couldn't create non-empty splits with the given proportions.")
        return md.split_at_indices(cuts)

    def split(self, n: int, *, equal: bool = False,
              locality_hints: Any = None) -> list[MaterializedDataset]:
        """n materialized datasets (equal=True: the same number of rows each, remainder dropped)."""
        from .dataset import MaterializedDataset

        if n < 1:
            raise ValueError(f"n must be >= 1, got {n}")
        bundles = self._bundles()
        total = sum(b.num_rows for b in bundles)
        if not equal:
            groups: list[list[Any]] = [[] for _ in range(n)]
            sizes = [0] * n
            for b in sorted(bundles, key=lambda b: -b.num_rows):
                i = sizes.index(min(sizes))
                groups[i].append(b)
                sizes[i] += b.num_rows
            return [MaterializedDataset(P.InputData(name="InputData", inputs=[], bundles=g))
                    for g in groups]
        md = MaterializedDataset(P.InputData(name="InputData", inputs=[], bundles=bundles))
        share = total // n
        cuts = [share * (i + 1) for i in range(n)]
        return md.split_at_indices(cuts)[:n] if share else [md.limit(0).materialize() for _ in range(n)]

    def train_test_split(self, test_size: float | int, *, shuffle: bool = False,
                         seed: int | None = None,
                         stratify: str | None = None) -> tuple[MaterializedDataset, MaterializedDataset]:
        """(train, test) materialized datasets; test_size is a fraction or a row count."""
        ds = self.random_shuffle(seed=seed) if shuffle else self
        total = ds.count()
        if isinstance(test_size, float):
            if not 0 < test_size < 1:
                raise ValueError(f"a float test_size must be between 0 and 1, got {test_size}")
            n_test = int(math.ceil(total * test_size))
        else:
            if not 0 < test_size < total:
                raise ValueError(f"test_size must be between 0 and {total}, got {test_size}")
            n_test = test_size
        train, test = ds.split_at_indices([total - n_test])
        return train, test

    def streaming_split(self, n: int, *, equal: bool = False,
                        locality_hints: Any = None) -> list[DataIterator]:
        """n DataIterators fed by one streaming execution (for n Train workers)."""
        from ._internal.streaming_split import make_split_iterators

        return make_split_iterators(self, n, equal)
