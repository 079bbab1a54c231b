"""Dataset.join as cluster tasks: hash-partition both sides on their keys, then join partition i
of the left with partition i of the right in one task per partition (Arrow's hash join).

    left blocks  --hash_partition--> n pieces each ─┐
    right blocks --hash_partition--> n pieces each ─┴─> join_partition(i) x n  -> n output blocks

The driver only routes references; no rows pass through it. Join types use Ray's names and
map to Arrow's; keys are coalesced (one key column per key, named as on the left, or as on the
right for right_outer); clashing non-key columns need a suffix, as in Ray.
"""
from __future__ import annotations

import time
from typing import Any, Generator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ember.data import block as B

JOIN_TYPES = {"inner": "inner", "left_outer": "left outer", "right_outer": "right outer",
              "full_outer": "full outer", "left_semi": "left semi", "right_semi": "right semi",
              "left_anti": "left anti", "right_anti": "right anti"}


def check_columns(left: list[str], right: list[str], join_type: str, left_on: list[str],
                  right_on: list[str], left_suffix: str | None, right_suffix: str | None) -> None:
    """ValueError for a missing key or for clashing columns without a suffix (Ray's rule)."""
    for side, cols, keys in (("left", left, left_on), ("right", right, right_on)):
        missing = [k for k in keys if k not in cols]
        if missing and cols:
            raise ValueError(f"join: key column(s) {missing} not in the {side} dataset's "
                             f"columns {cols}")
    if join_type.endswith(("semi", "anti")):
        return
    clash = set(left) & (set(right) - set(right_on))
    if clash and not left_suffix and not right_suffix:
        raise ValueError(f"join: both datasets have the column(s) {sorted(clash)}; give "
                         "left_suffix and/or right_suffix")


def partition_ids(block: pa.Table, keys: list[str], n: int) -> np.ndarray:
    """The partition (0..n-1) of each row: a hash of its key values that does not depend on the
    integer or float width, so equal keys of both sides land in the same partition."""
    import pandas as pd

    h = np.zeros(block.num_rows, dtype=np.uint64)
    for k in keys:
        col = block.column(k)
        t = col.type
        if pa.types.is_integer(t) or pa.types.is_boolean(t):  # null keys never match: any slot
            vals: Any = pc.fill_null(col.cast(pa.int64()), 0).to_numpy(zero_copy_only=False)
        elif pa.types.is_floating(t):
            vals = col.cast(pa.float64()).to_numpy(zero_copy_only=False)
        else:
            if pa.types.is_dictionary(t):
                col = col.cast(t.value_type)
            vals = np.asarray(col.to_numpy(zero_copy_only=False), dtype=object)
        h = h * np.uint64(1_000_003) ^ pd.util.hash_array(vals, categorize=False)
    return (h % np.uint64(n)).astype(np.int64)


def hash_partition(block: pa.Table, keys: list[str], n: int) -> tuple[Any, ...]:
    """Cuts a block into n pieces by key hash (piece i goes to join task i)."""
    if block.num_rows == 0:
        pieces = [block] * n
    else:
        pid = partition_ids(block, keys, n)
        order = np.argsort(pid, kind="stable")
        srt = block.take(pa.array(order))
        bounds = np.searchsorted(pid[order], np.arange(n + 1))
        pieces = [B.compact(srt.slice(int(a), int(b - a)))
                  for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
    return (*pieces, [(p.num_rows, B.size_bytes(p)) for p in pieces])


def concat_partition(sort_keys: list[str], *pieces: pa.Table) -> tuple[pa.Table, B.BlockMetadata]:
    """One partition of repartition(keys=...): its pieces together, sorted by sort_keys if any."""
    t0, c0 = time.perf_counter(), time.process_time()
    out = B.concat(pieces)
    if sort_keys and out.num_rows:
        out = out.sort_by([(k, "ascending") for k in sort_keys])
    out = B.compact(out)
    return out, B.metadata_of(out, stats=B.BlockExecStats(
        wall_time_s=time.perf_counter() - t0, cpu_time_s=time.process_time() - c0))


def _rename(tbl: pa.Table, names: set[str], suffix: str | None) -> pa.Table:
    if not suffix or not names:
        return tbl
    return tbl.rename_columns([f"{c}{suffix}" if c in names else c for c in tbl.column_names])


def join_partition(join_type: str, left_on: list[str], right_on: list[str],
                   left_suffix: str | None, right_suffix: str | None, n_left: int,
                   *pieces: pa.Table) -> tuple[pa.Table, B.BlockMetadata]:
    """Joins the left pieces of one partition with its right pieces."""
    t0, c0 = time.perf_counter(), time.process_time()
    left = B.concat(pieces[:n_left])
    right = B.concat(pieces[n_left:])
    if not join_type.endswith(("semi", "anti")):
        clash = set(left.column_names) & (set(right.column_names) - set(right_on))
        left = _rename(left, clash - set(left_on), left_suffix)
        right = _rename(right, clash, right_suffix)
    if not left.num_columns or not right.num_columns:
        out = left if join_type in ("left_outer", "left_anti", "full_outer") else \
            right if join_type in ("right_outer", "right_anti") else pa.table({})
    else:
        out = left.join(right, keys=left_on, right_keys=right_on,
                        join_type=JOIN_TYPES[join_type], use_threads=False)
    out = B.compact(out)
    return out, B.metadata_of(out, stats=B.BlockExecStats(
        wall_time_s=time.perf_counter() - t0, cpu_time_s=time.process_time() - c0))


def join_plan(inputs: list[list[Any]], p: dict[str, Any], ra: dict[str, Any],
              remote: Any, stage: Any) -> Generator[Any, list[Any], None]:
    """Stage 1: hash_partition every block of both sides; stage 2 (final): join_partition per
    partition, emitting num_partitions blocks."""
    left, right = inputs
    n = p["num_partitions"]
    schemas: list[list[str]] = [next((b.meta.schema.names for b in side if b.meta.schema is not None
                     and len(b.meta.schema)), []) for side in (left, right)]
    check_columns(list(schemas[0]), list(schemas[1]), p["join_type"], p["on"], p["right_on"],
                  p["left_suffix"], p["right_suffix"])
    part = remote(hash_partition, n + 1, ra)
    calls = [(part, (b.ref, p["on"], n), n + 1) for b in left] + \
            [(part, (b.ref, p["right_on"], n), n + 1) for b in right]
    res = yield stage(calls)
    nl = len(left)
    del left, right, inputs[0][:], inputs[1][:]
    red = remote(join_partition, 2, ra)
    final = []
    for i in range(n):
        refs = [r[0][i] for r in res[:nl]] + [r[0][i] for r in res[nl:]]
        final.append((red, (p["join_type"], p["on"], p["right_on"], p["left_suffix"],
                            p["right_suffix"], nl, *refs), 2))
    yield stage(final, final=True)
