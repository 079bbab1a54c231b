"""The steps a fused map task runs in a worker: each turns a stream of blocks into another.

A fused operator is a list of steps (read → map_batches → filter → write, say) applied one after the
other to the blocks of one task, without leaving the worker. Steps are plain picklable objects;
callable-class UDFs are instantiated once per actor (`setup`) and reused for every task.
"""
from __future__ import annotations

import inspect
from typing import Any, Callable, Iterator

import numpy as np
import pyarrow as pa

from ember.data import block as B


class Step:
    """One stage of a fused task: `apply(blocks) -> blocks`."""

    name = "Step"

    def setup(self) -> None:
        """Builds per-process state (callable-class instances); called once per worker/actor."""

    def apply(self, blocks: Iterator[pa.Table]) -> Iterator[pa.Table]:  # pragma: no cover
        raise NotImplementedError


class _UDF:
    """A function or a callable class with its arguments."""

    def __init__(self, fn: Any, fn_args: Any = None, fn_kwargs: Any = None,
                 ctor_args: Any = None, ctor_kwargs: Any = None) -> None:
        self.fn = fn
        self.args = tuple(fn_args or ())
        self.kwargs = dict(fn_kwargs or {})
        self.ctor_args = tuple(ctor_args or ())
        self.ctor_kwargs = dict(ctor_kwargs or {})
        self._callable: Callable[..., Any] | None = None

    def setup(self) -> None:
        self._instance()

    def _instance(self) -> Callable[..., Any]:
        """The function, or the class's instance (built on first use)."""
        if self._callable is not None:
            return self._callable
        is_class = inspect.isclass(self.fn)
        built: Callable[..., Any] = self.fn(*self.ctor_args, **self.ctor_kwargs) if is_class else self.fn
        self._callable = built
        return built

    def __call__(self, x: Any) -> Any:
        return self._instance()(x, *self.args, **self.kwargs)

    def __getstate__(self) -> dict[str, Any]:
        d = dict(self.__dict__)
        d["_callable"] = None
        return d


def udf_name(fn: Any) -> str:
    """A short name for a UDF in operator names (`MapBatches(detect_language)`)."""
    name = getattr(fn, "__name__", None) or type(fn).__name__
    return name


class _RowStep(Step):
    """A step that runs a row-wise user function (set up once per worker)."""

    def __init__(self, udf: _UDF, name: str) -> None:
        self.udf = udf
        self.name = name

    def setup(self) -> None:
        self.udf.setup()


class MapRows(_RowStep):
    """`Dataset.map`: one row in, one row out."""

    def apply(self, blocks: Iterator[pa.Table]) -> Iterator[pa.Table]:
        for blk in blocks:
            out = []
            for row in B.iter_rows(blk):
                r = self.udf(row)
                if not isinstance(r, dict):
                    raise ValueError(f"{self.name}: the function must return a dict per row, got "
                                     f"{type(r).__name__}")
                out.append(r)
            yield B.rows_to_block(out)


class FlatMap(_RowStep):
    """`Dataset.flat_map`: one row in, a list of rows out."""

    def apply(self, blocks: Iterator[pa.Table]) -> Iterator[pa.Table]:
        for blk in blocks:
            out: list[Any] = []
            for row in B.iter_rows(blk):
                out.extend(self.udf(row))
            yield B.rows_to_block(out)


class Filter(_RowStep):
    """`Dataset.filter(fn)`: keeps the rows for which fn(row) is true."""

    def apply(self, blocks: Iterator[pa.Table]) -> Iterator[pa.Table]:
        for blk in blocks:
            mask = np.fromiter((bool(self.udf(r)) for r in B.iter_rows(blk)), dtype=bool,
                               count=blk.num_rows)
            yield blk.filter(pa.array(mask)) if not mask.all() else blk


class FilterExpr(Step):
    """`Dataset.filter(expr=...)`: an Arrow compute expression evaluated on whole blocks."""

    def __init__(self, expr: Any, name: str) -> None:
        self.expr = expr
        self.name = name

    def apply(self, blocks: Iterator[pa.Table]) -> Iterator[pa.Table]:
        import pyarrow.compute as pc

        from ember.data.expressions import evaluate_column

        for blk in blocks:
            if not blk.num_rows:
                yield blk
            elif isinstance(self.expr, pc.Expression):
                yield blk.filter(self.expr)
            else:  # an Ember expression with no pyarrow equivalent (string/list functions)
                yield blk.filter(evaluate_column(self.expr, blk))


class WithColumns(Step):
    """`Dataset.with_column(s)`: adds or replaces columns computed from expressions (each
    part a {name: expr} mapping or an unnest() of a struct expression), all evaluated on the
    input block."""

    def __init__(self, parts: list[Any], name: str) -> None:
        self.parts = parts
        self.name = name

    def apply(self, blocks: Iterator[pa.Table]) -> Iterator[pa.Table]:
        from ember.data.expressions import evaluate_column

        for blk in blocks:
            new: dict[str, Any] = {}
            for part in self.parts:
                if isinstance(part, dict):
                    new.update({n: evaluate_column(e, blk) for n, e in part.items()})
                else:
                    new.update(part.columns(blk))
            for n, values in new.items():
                if n in blk.column_names:
                    blk = blk.set_column(blk.column_names.index(n), n, values)
                else:
                    blk = blk.append_column(n, values)
            yield blk


class MapBatches(Step):
    """`Dataset.map_batches`: re-batches to batch_size rows and calls the UDF per batch."""

    def __init__(self, udf: _UDF, name: str, batch_size: int | None, batch_format: str | None,
                 zero_copy_batch: bool) -> None:
        if batch_format not in B.VALID_BATCH_FORMATS:
            raise ValueError(f"batch_format must be one of 'default', 'numpy', 'pandas', 'pyarrow'; "
                             f"got {batch_format!r}")
        self.udf = udf
        self.name = name
        self.batch_size = batch_size
        self.batch_format = batch_format
        self.zero_copy = zero_copy_batch

    def setup(self) -> None:
        self.udf.setup()

    def apply(self, blocks: Iterator[pa.Table]) -> Iterator[pa.Table]:
        for batch in rebatch(blocks, self.batch_size):
            out = self.udf(B.block_to_batch(batch, self.batch_format, self.zero_copy))
            if inspect.isgenerator(out):
                for o in out:
                    yield B.to_block(o)
            else:
                yield B.to_block(out)


class Project(Step):
    """select_columns / drop_columns / rename_columns, zero-copy."""

    def __init__(self, select: list[str] | None = None, drop: list[str] | None = None,
                 rename: dict[str, str] | None = None, name: str = "Project") -> None:
        self.select = select
        self.drop = drop
        self.rename = rename
        self.name = name

    def apply(self, blocks: Iterator[pa.Table]) -> Iterator[pa.Table]:
        for blk in blocks:
            if self.select is not None:
                missing = [c for c in self.select if c not in blk.column_names]
                if missing and blk.num_columns:
                    raise KeyError(f"{self.name}: no column(s) {missing} in {blk.column_names}")
                blk = blk.select(self.select) if blk.num_columns else blk
            if self.drop is not None:
                missing = [c for c in self.drop if c not in blk.column_names]
                if missing and blk.num_columns:
                    raise KeyError(f"{self.name}: no column(s) {missing} in {blk.column_names}")
                blk = blk.drop_columns([c for c in self.drop if c in blk.column_names])
            if self.rename is not None:
                blk = blk.rename_columns([self.rename.get(c, c) for c in blk.column_names])
            yield blk


class RandomSample(Step):
    """`Dataset.random_sample`: keeps each row with probability `fraction`."""

    def __init__(self, fraction: float, seed: int | None) -> None:
        self.fraction = fraction
        self.seed = seed
        self.name = "RandomSample"

    def apply(self, blocks: Iterator[pa.Table]) -> Iterator[pa.Table]:
        rng = np.random.default_rng(self.seed)
        for blk in blocks:
            yield blk.filter(pa.array(rng.random(blk.num_rows) < self.fraction))


class Write(Step):
    """Hands every block of the task to a datasink's `write(blocks, ctx)`; yields one row: the
    rows and bytes written and the sink's return value (pickled), for `on_write_complete`."""

    def __init__(self, sink: Any, name: str) -> None:
        self.sink = sink
        self.name = name

    def apply(self, blocks: Iterator[pa.Table]) -> Iterator[pa.Table]:
        import cloudpickle

        from .tasks import current_task_context

        ctx = current_task_context()
        seen = [0, 0]

        def counted() -> Iterator[pa.Table]:
            for b in blocks:
                seen[0] += b.num_rows
                seen[1] += b.nbytes
                yield b

        ret = self.sink.write(counted(), ctx)
        yield pa.table({"num_rows": pa.array([seen[0]], pa.int64()),
                        "size_bytes": pa.array([seen[1]], pa.int64()),
                        "write_return": pa.array([cloudpickle.dumps(ret)], pa.binary())})


def rebatch(blocks: Iterator[pa.Table], batch_size: int | None) -> Iterator[pa.Table]:
    """Batches of exactly batch_size rows (the last may be short); None: one batch per block."""
    if batch_size is None:
        for blk in blocks:
            if blk.num_rows or blk.num_columns:
                yield blk
        return
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1 or None, got {batch_size}")
    pending: list[pa.Table] = []
    have = 0
    for blk in blocks:
        off = 0
        n = blk.num_rows
        while off < n:
            take = min(batch_size - have, n - off)
            pending.append(blk.slice(off, take))
            have += take
            off += take
            if have == batch_size:
                yield pending[0] if len(pending) == 1 else B.concat(pending)
                pending, have = [], 0
    if have:
        yield pending[0] if len(pending) == 1 else B.concat(pending)


def run_steps(steps: list[Step], blocks: Iterator[pa.Table]) -> Iterator[pa.Table]:
    """Chains steps over blocks (lazily)."""
    for s in steps:
        blocks = s.apply(blocks)
    return blocks
