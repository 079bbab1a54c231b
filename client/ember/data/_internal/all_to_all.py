"""All-to-all operators: they take all their input, then run stages of tasks.

A plan is a generator: it yields a Stage (calls to launch), receives each call's refs and the
value of its last return, and finally yields a Final stage whose calls each return one output
block (emitted in order as they finish). random_shuffle = shuffle_map per block → shuffle_reduce
per output block; sort and groupby = sample → sort_map (range cuts) → sort/agg/map-groups reduce;
join = hash_partition per block of both sides → join_partition per partition (see join.py);
repartition without shuffle = slice tasks along row counts; zip = per left block, the right rows
that line up.
"""
from __future__ import annotations

import collections
import dataclasses
import random
from typing import Any, Generator

import numpy as np

import ember

from . import all_to_all_tasks as T
from .operators import Call, RefBundle, RuntimeOp
from .sizing import slices_at, split_even
from .tasks import slice_task

StageCall = tuple[Any, tuple[Any, ...], int]  # (remote fn, args, num_returns)


@dataclasses.dataclass
class Stage:
    """Calls to run before the plan continues: (remote fn, args, num_returns)."""

    calls: list[StageCall]
    final: bool = False


# What a plan is sent back after a stage: each call's (refs, value of the last ref), in order.
Plan = Generator[Stage, list[Any], None]


def _remote(fn: Any, num_returns: int | str, remote_args: dict[str, Any]) -> Any:
    args = {k: v for k, v in remote_args.items() if v is not None}
    return ember.remote(num_returns=num_returns, **args)(fn)


def shuffle_plan(inputs: list[list[RefBundle]], p: dict[str, Any], ra: dict[str, Any]) -> Plan:
    bundles = inputs[0]
    n_out = p.get("num_blocks") or max(1, len(bundles))
    seed = p.get("seed")
    rng = random.Random(seed)
    if not bundles:
        return
    map_fn = _remote(T.shuffle_map, n_out + 1, ra)
    res = yield Stage([(map_fn, (b.ref, n_out, rng.getrandbits(63)), n_out + 1) for b in bundles])
    del bundles, inputs[0][:]
    red = _remote(T.shuffle_reduce, 2, ra)
    yield Stage([(red, (rng.getrandbits(63), *[r[0][j] for r in res]), 2) for j in range(n_out)],
                final=True)


def _boundaries(inputs: list[RefBundle], key: str, n_out: int, descending: bool,
                given: list[Any] | None, ra: dict[str, Any]) -> Generator[Stage, list[Any], list[Any]]:
    if given is not None:
        return sorted(given, reverse=descending)
    if n_out <= 1:
        return []
    samp = _remote(T.sample_keys, 1, ra)
    res = yield Stage([(samp, (b.ref, key, 32), 1) for b in inputs])
    vals = [v for r in res for v in r[1] if v is not None]
    if not vals:
        return []
    arr = np.sort(np.array(vals, dtype=object if isinstance(vals[0], str) else None))
    qs = [arr[min(len(arr) - 1, int(len(arr) * i / n_out))] for i in range(1, n_out)]
    qs = sorted(set(qs), key=lambda x: x)
    bounds = [x.item() if hasattr(x, "item") else x for x in qs]
    return sorted(bounds, reverse=descending)


def sort_plan(inputs: list[list[RefBundle]], p: dict[str, Any], ra: dict[str, Any]) -> Plan:
    bundles = [b for b in inputs[0] if b.num_rows]
    if not bundles:
        return
    keys: list[str] = p["keys"]
    desc: list[bool] = p["descending"]
    n_out = p.get("num_blocks") or len(bundles)
    if keys:
        bounds = yield from _boundaries(bundles, keys[0], n_out, desc[0], p.get("boundaries"), ra)
    else:
        bounds = []
    n_parts = len(bounds) + 1
    m = _remote(T.sort_map, n_parts + 1, ra)
    res = yield Stage([(m, (b.ref, keys, desc, bounds), n_parts + 1) for b in bundles])
    del bundles, inputs[0][:]
    kind = p.get("reduce", "sort")
    if kind == "sort":
        red = _remote(T.sort_reduce, 2, ra)
        calls = [(red, (keys, desc, *[r[0][j] for r in res]), 2) for j in range(n_parts)]
    elif kind == "agg":
        red = _remote(T.agg_reduce, 2, ra)
        calls = [(red, (keys, p["aggs"], *[r[0][j] for r in res]), 2) for j in range(n_parts)]
    else:
        red = _remote(T.map_groups_reduce, 2, ra)
        calls = [(red, (keys, p["fn"], p["batch_format"], p["fn_args"], p["fn_kwargs"],
                        p["op_name"], *[r[0][j] for r in res]), 2) for j in range(n_parts)]
    yield Stage(calls, final=True)


def repartition_plan(inputs: list[list[RefBundle]], p: dict[str, Any], ra: dict[str, Any]) -> Plan:
    bundles = inputs[0]
    total = sum(b.num_rows for b in bundles)
    if p.get("target_num_rows_per_block"):
        n = max(1, -(-total // p["target_num_rows_per_block"]))
    elif p.get("min_rows_per_block"):  # blocks of at least that many rows (a write's files)
        n = max(1, total // p["min_rows_per_block"])
    else:
        n = p["num_blocks"]
    if p.get("shuffle"):
        yield from shuffle_plan(inputs, {"num_blocks": n, "seed": p.get("seed")}, ra)
        return
    if p.get("strict") and p.get("target_num_rows_per_block"):
        t = p["target_num_rows_per_block"]
        counts = [t] * (total // t) + ([total % t] if total % t else [])
        n = len(counts)
    else:
        counts = split_even(total, n)
    cuts = list(np.cumsum(counts)[:-1]) if n > 1 else []
    parts = slices_at([b.num_rows for b in bundles], [int(c) for c in cuts])
    calls = []
    for part in parts:
        spec = [(off, rows) for _, off, rows in part]
        calls.append((slice_task, (spec, *[bundles[bi].ref for bi, _, _ in part]), 2))
    yield Stage(calls, final=True)


def randomize_plan(inputs: list[list[RefBundle]], p: dict[str, Any], ra: dict[str, Any]) -> Plan:
    """No tasks: the blocks are emitted in a random order (handled by the operator)."""
    return
    yield  # pragma: no cover


def zip_plan(inputs: list[list[RefBundle]], p: dict[str, Any], ra: dict[str, Any]) -> Plan:
    left = inputs[0]
    for other in inputs[1:]:
        nl = sum(b.num_rows for b in left)
        nr = sum(b.num_rows for b in other)
        if nl != nr:
            raise ValueError(f"zip: the datasets have different numbers of rows ({nl} and {nr})")
    rights = inputs[1:]
    calls = []
    z = _remote(T.zip_blocks, 2, ra)
    cuts = list(np.cumsum([b.num_rows for b in left])[:-1])
    per_right = [slices_at([b.num_rows for b in r], [int(c) for c in cuts]) for r in rights]
    if len(rights) > 1:
        raise ValueError("zip of more than two datasets: zip them one at a time")
    for i, lb in enumerate(left):
        part = per_right[0][i]
        spec = [(off, rows) for _, off, rows in part]
        calls.append((z, (lb.ref, spec, *[rights[0][bi].ref for bi, _, _ in part]), 2))
    yield Stage(calls, final=True)


def join_plan(inputs: list[list[RefBundle]], p: dict[str, Any], ra: dict[str, Any]) -> Plan:
    from .join import join_plan as plan

    yield from plan(inputs, p, ra, _remote, Stage)


def hash_repartition_plan(inputs: list[list[RefBundle]], p: dict[str, Any],
                          ra: dict[str, Any]) -> Plan:
    """hash_partition per block, then one task per partition concatenates (and sorts) it."""
    from .join import concat_partition, hash_partition

    bundles = inputs[0]
    n = p["num_blocks"]
    if not bundles:
        return
    part = _remote(hash_partition, n + 1, ra)
    res = yield Stage([(part, (b.ref, p["keys"], n), n + 1) for b in bundles])
    del bundles, inputs[0][:]
    red = _remote(concat_partition, 2, ra)
    keys = p["keys"] if p.get("sort") else []
    yield Stage([(red, (keys, *[r[0][j] for r in res]), 2) for j in range(n)], final=True)


PLANS = {"random_shuffle": shuffle_plan, "sort": sort_plan, "repartition": repartition_plan,
         "randomize_block_order": randomize_plan, "zip": zip_plan, "join": join_plan,
         "hash_repartition": hash_repartition_plan}


class AllToAllOp(RuntimeOp):
    """Collects every input block, then runs a plan's stages."""

    barrier = True

    def __init__(self, name: str, kind: str, params: dict[str, Any], num_inputs: int,
                 remote_args: dict[str, Any]) -> None:
        super().__init__(name, num_inputs)
        self.kind = kind
        self.params = params
        self.remote_args = dict(remote_args)
        self.remote_args.setdefault("num_cpus", 1)
        self.collected: list[list[RefBundle]] = [[] for _ in range(num_inputs)]
        self.gen: Plan | None = None
        self.done_plan = False
        self.stage: Stage | None = None
        self.pending: collections.deque[tuple[int, StageCall]] = collections.deque()
        self.results: list[Any] = []
        self.left = 0
        self.max_in_flight = 64

    def poll(self) -> None:
        for i, q in enumerate(self.inqueues):
            while q:
                self.collected[i].append(q.popleft())
        if self.gen is None and self.all_inputs_done():
            for c in self.collected:  # upstream order (zip aligns rows by position)
                c.sort(key=lambda b: b.seq)
            if self.kind == "randomize_block_order":
                blocks = list(self.collected[0])
                random.Random(self.params.get("seed")).shuffle(blocks)
                for i, b in enumerate(blocks):
                    self.emit(RefBundle(b.ref, b.meta, (i,)))
                self.collected = [[]]
                self.done_plan = True
                self.gen = randomize_plan(self.collected, self.params, self.remote_args)  # no stages
                return
            self.gen = PLANS[self.kind](self.collected, self.params, self.remote_args)
            self._advance(None)

    def _advance(self, results: list[Any] | None) -> None:
        assert self.gen is not None
        try:
            st = next(self.gen) if results is None else self.gen.send(results)
        except StopIteration:
            self.done_plan = True
            self.stage = None
            self.collected = [[] for _ in self.collected]
            return
        self.stage = st
        self.pending = collections.deque(enumerate(st.calls))
        self.results = [None] * len(st.calls)
        self.left = len(st.calls)
        if not st.calls:
            self._advance([])

    def internal_bytes(self) -> int:
        return sum(b.size_bytes for c in self.collected for b in c)

    def can_launch(self) -> bool:
        return bool(self.pending) and self.in_flight < self.max_in_flight

    def next_call(self) -> Call | None:
        i, (fn, args, nret) = self.pending.popleft()
        st = self.stage
        assert st is not None

        def done(refs: list[Any], last: Any) -> None:
            if st.final:
                self.emit_at(self._next_final + i, RefBundle(refs[0], last, (i,)), True)
            else:
                self.results[i] = (refs[:-1] if nret > 1 else refs, last)
            self.left -= 1
            if self.left == 0:
                if st.final:
                    self._next_final += len(st.calls)
                self._advance(None if st.final else self.results)

        return Call(fn, args, done, 0, (i,), num_returns=nret, index=i)

    _next_final = 0

    def completed(self) -> bool:
        return self.done_plan and self.in_flight == 0 and not self.pending
