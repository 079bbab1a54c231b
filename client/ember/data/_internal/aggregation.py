"""Running aggregations over blocks (pure: no cluster).

Global: every block gives one partial accumulator per aggregation (`block_partials`, run in map
tasks); the driver merges them in block order and finalizes (`merge_partials`). Grouped: a reduce
task holds whole groups (range-partitioned by key), so `aggregate_groups` computes each group's
result at once — one vectorized Arrow `group_by` for the built-ins that name a kernel, and
`aggregate_block` per group slice for the others (user AggregateFnV2, Quantile, Unique...).
"""
from __future__ import annotations

import math
import pickle
from typing import Any, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ember.data.aggregate import AggregateFn, Std

PARTIAL_COLUMN = "__ember_partial_aggs"


def validate(aggs: Sequence[Any], schema: pa.Schema | None) -> None:
    """TypeError for a non-aggregation, ValueError for a missing column."""
    if not aggs:
        raise ValueError("aggregate() needs at least one aggregation")
    for a in aggs:
        if not isinstance(a, AggregateFn):
            raise TypeError(f"aggregate() takes AggregateFnV2/AggregateFn instances, got "
                            f"{type(a).__name__}")
        a._validate(schema)


def output_names(aggs: Sequence[AggregateFn]) -> list[str]:
    """The result columns: each aggregation's name, a repeated one suffixed _2, _3... (as Ray)."""
    seen: dict[str, int] = {}
    out = []
    for a in aggs:
        seen[a.name] = seen.get(a.name, 0) + 1
        out.append(a.name if seen[a.name] == 1 else f"{a.name}_{seen[a.name]}")
    return out


def block_partials(block: pa.Table, aggs: Sequence[AggregateFn]) -> list[Any]:
    """One accumulator per aggregation for this block."""
    return [a.accumulate_block(a.init(None), block) for a in aggs]


def partial_table(block: pa.Table, aggs: Sequence[AggregateFn]) -> pa.Table:
    """block_partials of one block as a one-row table (the accumulators pickled: they may be
    sets, dicts or lists of any type)."""
    data = pickle.dumps(block_partials(block, aggs), protocol=5)
    return pa.table({PARTIAL_COLUMN: pa.array([data], type=pa.binary())})


def merge_partials(aggs: Sequence[AggregateFn], partials: Sequence[list[Any]]) -> dict[str, Any]:
    """Merges per-block accumulators (in block order) and finalizes: {name: value}."""
    accs = [a.init(None) for a in aggs]
    for part in partials:
        accs = [a.merge(acc, p) for a, acc, p in zip(aggs, accs, part, strict=True)]
    return {n: a.finalize(acc) for n, a, acc in zip(output_names(aggs), aggs, accs, strict=True)}


def _group_starts(tbl: pa.Table, keys: list[str]) -> list[int]:
    change = np.zeros(tbl.num_rows, dtype=bool)
    change[0] = True
    for k in keys:
        col = tbl.column(k)
        vals = col.to_numpy(zero_copy_only=False)
        valid = col.is_valid().to_numpy(zero_copy_only=False)
        with np.errstate(invalid="ignore"):
            diff = vals[1:] != vals[:-1]
            if vals.dtype.kind == "f":  # NaN keys form one group, as Arrow's group_by has it
                diff &= ~(np.isnan(vals[1:]) & np.isnan(vals[:-1]))
        change[1:] |= (diff & valid[1:] & valid[:-1]) | (valid[1:] != valid[:-1])
    return [int(i) for i in np.flatnonzero(change)] + [tbl.num_rows]


def _vectorized(tbl: pa.Table, keys: list[str], aggs: list[AggregateFn]) -> list[pa.ChunkedArray]:
    specs: list[tuple[Any, str, Any]] = []
    for a in aggs:
        fn, opts = a._arrow_kernel()  # type: ignore[misc]  # not None: only those with a kernel come here
        on = a.get_target_column()  # type: ignore[attr-defined]  # the built-ins with a kernel are V2
        specs.append(([] if fn == "count_all" else on, fn, opts))
        if isinstance(a, Std):  # to tell "too few values" (NaN) from "no values" (None)
            specs.append((on, "count", pc.CountOptions(mode="only_valid")))
    out = tbl.group_by(keys, use_threads=False).aggregate(specs)
    out = out.sort_by([(k, "ascending") for k in keys])
    nk = len(keys)
    first = out.column_names[:nk] == keys
    cols = [out.column((nk if first else 0) + i) for i in range(len(specs))]
    res, i = [], 0
    for a in aggs:
        col = cols[i]
        i += 1
        if isinstance(a, Std):
            n = cols[i]
            i += 1
            col = pc.if_else(pc.and_(pc.is_null(col), pc.greater(n, 0)),
                             pa.scalar(math.nan, pa.float64()), col)
        res.append(col)
    return res


def aggregate_groups(tbl: pa.Table, keys: list[str], aggs: Sequence[AggregateFn]) -> pa.Table:
    """One row per group of `keys` (sorted by key; all rows as one group when keys is empty),
    the key columns first and then one column per aggregation, named by its `name`."""
    aggs = list(aggs)
    if not keys:
        return pa.table({n: _as_column([v]) for n, v in
                         merge_partials(aggs, [block_partials(tbl, aggs)]).items()})
    if tbl.num_rows == 0:
        return pa.table({})
    names = output_names(aggs)
    fast = [i for i, a in enumerate(aggs) if a._arrow_kernel() is not None]
    slow = [i for i, a in enumerate(aggs) if a._arrow_kernel() is None]
    srt = tbl.sort_by([(k, "ascending") for k in keys])
    starts = _group_starts(srt, keys)
    key_idx = pa.array(starts[:-1], type=pa.int64())
    result: dict[str, Any] = {k: srt.column(k).take(key_idx) for k in keys}
    by_index: dict[int, Any] = {}
    if fast:
        cols = _vectorized(srt, keys, [aggs[i] for i in fast])
        by_index.update(zip(fast, cols, strict=True))
    if slow:
        values: list[list[Any]] = [[] for _ in slow]
        for a0, b0 in zip(starts, starts[1:], strict=False):
            group = srt.slice(a0, b0 - a0)
            key = tuple(srt.column(k)[a0].as_py() for k in keys)
            key = key[0] if len(keys) == 1 else key
            for j, i in enumerate(slow):
                a = aggs[i]
                values[j].append(a.finalize(a.accumulate_block(a.init(key), group)))
        by_index.update({i: _as_column(v) for i, v in zip(slow, values, strict=True)})
    for i, n in enumerate(names):
        result[n] = by_index[i]
    return pa.table(result)


def _as_column(values: list[Any]) -> pa.Array:
    return pa.array(values)
