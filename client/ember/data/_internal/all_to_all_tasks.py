"""Worker-side functions of the all-to-all operators: shuffle, sort, aggregate, zip."""
from __future__ import annotations

import time
from typing import Any

import numpy as np
import pyarrow as pa

from ember.data import block as B

from .tasks import annotate


def _meta(out: pa.Table, t0: float, c0: float) -> B.BlockMetadata:
    return B.metadata_of(out, stats=B.BlockExecStats(wall_time_s=time.perf_counter() - t0,
                                                     cpu_time_s=time.process_time() - c0))


def _split_even(tbl: pa.Table, n: int) -> list[pa.Table]:
    rows = tbl.num_rows
    base, extra = divmod(rows, n)
    out, off = [], 0
    for i in range(n):
        k = base + (1 if i < extra else 0)
        out.append(B.compact(tbl.slice(off, k)))  # a slice would pickle the whole table
        off += k
    return out


def shuffle_map(block: pa.Table, n_out: int, seed: int | None) -> tuple[Any, ...]:
    """Permutes a block's rows and cuts it into n_out pieces (one per reducer)."""
    rng = np.random.default_rng(seed)
    perm = rng.permutation(block.num_rows)
    shuffled = block.take(pa.array(perm)) if block.num_rows else block
    pieces = _split_even(shuffled, n_out)
    return (*pieces, [(p.num_rows, B.size_bytes(p)) for p in pieces])


def shuffle_reduce(seed: int | None, *pieces: pa.Table) -> tuple[pa.Table, B.BlockMetadata]:
    """Concatenates one piece from every mapper and permutes the rows again."""
    t0, c0 = time.perf_counter(), time.process_time()
    tbl = B.concat(pieces)
    if tbl.num_rows:
        rng = np.random.default_rng(seed)
        tbl = tbl.take(pa.array(rng.permutation(tbl.num_rows)))
    return tbl, _meta(tbl, t0, c0)


def sample_keys(block: pa.Table, key: str, n: int) -> list[Any]:
    """Up to n evenly spaced values of column key (for sort boundaries)."""
    if block.num_rows == 0:
        return []
    idx = np.linspace(0, block.num_rows - 1, min(n, block.num_rows)).astype(np.int64)
    keys: list[Any] = block.column(key).take(pa.array(idx)).to_pylist()
    return keys


def _sort(tbl: pa.Table, keys: list[str], descending: list[bool]) -> pa.Table:
    if tbl.num_rows == 0 or not keys:
        return tbl
    return tbl.sort_by([(k, "descending" if d else "ascending") for k, d in zip(keys, descending, strict=False)])


def sort_map(block: pa.Table, keys: list[str], descending: list[bool],
             boundaries: list[Any]) -> tuple[Any, ...]:
    """Sorts a block and cuts it at the boundaries of the first key (len+1 pieces)."""
    tbl = _sort(block, keys, descending)
    if not boundaries or not keys:
        return (tbl, [(tbl.num_rows, B.size_bytes(tbl))])
    col = tbl.column(keys[0]).to_numpy(zero_copy_only=False) if tbl.num_rows else np.array([])
    if descending[0]:
        # col is descending: cut where values drop to or below each (descending) boundary
        cuts = [int(len(col) - np.searchsorted(col[::-1], b, side="right")) for b in boundaries]
    else:
        cuts = [int(np.searchsorted(col, b, side="left")) for b in boundaries]
    bounds = [0] + cuts + [tbl.num_rows]
    pieces = [B.compact(tbl.slice(a, max(0, b - a))) for a, b in zip(bounds, bounds[1:], strict=False)]
    return (*pieces, [(p.num_rows, B.size_bytes(p)) for p in pieces])


def sort_reduce(keys: list[str], descending: list[bool], *pieces: pa.Table) -> tuple[pa.Table, B.BlockMetadata]:
    """Merges the pieces of one key range."""
    t0, c0 = time.perf_counter(), time.process_time()
    tbl = _sort(B.concat(pieces), keys, descending)
    return tbl, _meta(tbl, t0, c0)


def agg_reduce(keys: list[str], aggs: list[Any], *pieces: pa.Table) -> tuple[pa.Table, B.BlockMetadata]:
    """Aggregates one key range (pieces come from sort_map, so every group is whole here)."""
    from .aggregation import aggregate_groups

    t0, c0 = time.perf_counter(), time.process_time()
    tbl = B.concat(pieces)
    out = aggregate_groups(tbl, keys, aggs) if tbl.num_rows or not keys else pa.table({})
    return out, _meta(out, t0, c0)


def map_groups_reduce(keys: list[str], fn: Any, batch_format: str, fn_args: tuple[Any, ...],
                      fn_kwargs: dict[str, Any], op_name: str,
                      *pieces: pa.Table) -> tuple[pa.Table, B.BlockMetadata]:
    """Calls fn once per group of one key range."""
    t0, c0 = time.perf_counter(), time.process_time()
    tbl = _sort(B.concat(pieces), keys, [False] * len(keys))
    outs = []
    try:
        if tbl.num_rows:
            key_np = [tbl.column(k).to_numpy(zero_copy_only=False) for k in keys]
            change = np.zeros(tbl.num_rows, dtype=bool)
            change[0] = True
            for arr in key_np:
                change[1:] |= arr[1:] != arr[:-1]
            starts = list(np.flatnonzero(change)) + [tbl.num_rows]
            for a, b in zip(starts, starts[1:], strict=False):
                group = tbl.slice(int(a), int(b - a))
                outs.append(B.to_block(fn(B.block_to_batch(group, batch_format), *fn_args, **fn_kwargs)))
    except Exception as e:
        annotate(e, op_name)
        raise
    out = B.compact(B.concat(outs)) if outs else pa.table({})
    return out, _meta(out, t0, c0)


def zip_blocks(left: pa.Table, parts: list[tuple[int, int]],
               *rights: pa.Table) -> tuple[pa.Table, B.BlockMetadata]:
    """left's columns next to the rows of the right side that line up with it."""
    t0, c0 = time.perf_counter(), time.process_time()
    right = B.concat([r.slice(o, n) for (o, n), r in zip(parts, rights, strict=False)])
    cols = dict(zip(left.column_names, left.columns, strict=False))
    for name, col in zip(right.column_names, right.columns, strict=False):
        new = name
        i = 1
        while new in cols:
            new = f"{name}_{i}"
            i += 1
        cols[new] = col
    out = B.compact(pa.table(cols))
    return out, _meta(out, t0, c0)
