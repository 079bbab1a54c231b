"""Block sizing and splitting arithmetic (pure)."""
from __future__ import annotations

from typing import Sequence


def group_pieces(sizes: Sequence[int], target_bytes: int, min_groups: int) -> list[list[int]]:
    """Groups consecutive pieces (row groups, files) into tasks of about target_bytes each, with
    at least min_groups groups when there are that many pieces. Returns lists of piece indexes."""
    n = len(sizes)
    if n == 0:
        return []
    total = sum(sizes)
    target = max(1, target_bytes)
    if min_groups > 1:
        target = min(target, max(1, total // min(min_groups, n)))
    groups: list[list[int]] = []
    cur: list[int] = []
    cur_bytes = 0
    for i, s in enumerate(sizes):
        if cur and cur_bytes + s > target:
            groups.append(cur)
            cur, cur_bytes = [], 0
        cur.append(i)
        cur_bytes += s
    if cur:
        groups.append(cur)
    return groups


def split_even(total: int, n: int) -> list[int]:
    """n counts that add up to total, differing by at most one (larger ones first)."""
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    base, extra = divmod(total, n)
    return [base + (1 if i < extra else 0) for i in range(n)]


def slices_at(block_rows: Sequence[int], cuts: Sequence[int]) -> list[list[tuple[int, int, int]]]:
    """Cuts a sequence of blocks at global row indexes `cuts` (sorted, within [0, total]).

    Returns len(cuts) + 1 parts; each part is a list of (block index, offset, rows)."""
    total = sum(block_rows)
    bounds = [0] + [min(max(c, 0), total) for c in cuts] + [total]
    for a, b in zip(bounds, bounds[1:], strict=False):
        if b < a:
            raise ValueError(f"indices must be sorted ascending, got {list(cuts)}")
    parts: list[list[tuple[int, int, int]]] = []
    starts = []
    acc = 0
    for r in block_rows:
        starts.append(acc)
        acc += r
    for lo, hi in zip(bounds, bounds[1:], strict=False):
        part = []
        for bi, (st, r) in enumerate(zip(starts, block_rows, strict=False)):
            a, b = max(lo, st), min(hi, st + r)
            if b > a:
                part.append((bi, a - st, b - a))
        parts.append(part)
    return parts


def rows_per_block(num_rows: int, num_blocks: int) -> list[int]:
    """Row counts of num_blocks blocks holding num_rows rows (as even as possible)."""
    return split_even(num_rows, max(1, num_blocks))
