"""Dataset: a lazy plan of operators over Arrow blocks (Ray Data's Dataset API).

Transforms return a new Dataset with one more logical operator; nothing runs until the data is
consumed (iterate, take, count, write, materialize...). Consumption methods are in
`_consume.py`, iteration in `iterator.py`.
"""
from __future__ import annotations

import itertools
import warnings
from typing import Any, Callable, Iterator

import pyarrow as pa

from ._consume import ConsumeMixin
from ._internal import plan as P
from ._internal import transforms as T
from ._internal.compute import TaskPoolStrategy, get_compute
from ._write_media import WriteMediaMixin

_ids = itertools.count()


def _remote_args(num_cpus: Any, num_gpus: Any, memory: Any, resources: Any,
                 extra: dict[str, Any]) -> dict[str, Any]:
    args = {k: v for k, v in {"num_cpus": num_cpus, "num_gpus": num_gpus, "memory": memory,
                               "resources": resources}.items() if v is not None}
    for k in ("label_selector", "fallback_strategy", "accelerator_type", "runtime_env",
              "ray_remote_args_fn", "max_calls"):
        if extra.pop(k, None) is not None:
            raise ValueError(f"ember.data does not support {k!r} yet")
    args.update(extra)
    for k in ("num_cpus", "num_gpus"):
        if k in args and (not isinstance(args[k], (int, float)) or args[k] < 0):
            raise ValueError(f"{k} must be a number >= 0, got {args[k]!r}")
    return args


class Dataset(ConsumeMixin, WriteMediaMixin):
    """A distributed collection of rows, computed lazily and streamed block by block."""

    def __init__(self, plan: P.LogicalOp) -> None:
        self._plan = plan
        self._uuid = f"dataset_{next(_ids)}"
        self._last_stats: Any = None

    def __repr__(self) -> str:
        """As Ray prints it: the operators newest first, then `Dataset(num_rows=..., schema=...)`
        with the count and schema of the source when the plan is one chain (`?` and `Unknown
        schema` when they are not known without running it)."""
        from ._internal.plan_repr import format_dataset, plan_lines

        lines, depth = plan_lines(self._plan)
        src = self._plan
        while len(src.inputs) == 1:
            src = src.inputs[0]
        count = schema = None
        if not src.inputs:  # one chain down to the source
            base = Dataset(src)
            count = base._meta_count()
            s = base.schema()
            schema = list(zip(s.names, s.types, strict=True)) if s is not None else None
        num_blocks = None
        if isinstance(self, MaterializedDataset) and isinstance(self._plan, P.InputData):
            num_blocks = len(self._plan.bundles)
        return format_dataset(type(self).__name__, lines, depth, num_blocks, count, schema)

    def _meta_count(self) -> int | None:
        """The row count if metadata knows it without reading rows, else None."""
        p = self._plan
        if isinstance(p, P.InputData):
            return sum(b.num_rows for b in p.bundles)
        if isinstance(p, P.Read) and p.filter is None and hasattr(p.datasource, "num_rows"):
            n = p.datasource.num_rows()
            return int(n) if n is not None else None
        return None

    def _with(self, op: P.LogicalOp) -> Dataset:
        return Dataset(op)

    # --- row and batch transforms -------------------------------------------------------------
    def _map_op(self, name: str, step: T.Step, fn: Any, compute: Any, concurrency: Any,
                fn_constructor_args: Any, num_cpus: Any, num_gpus: Any, memory: Any,
                resources: Any, ray_remote_args: dict[str, Any]) -> Dataset:
        strat = get_compute(fn, compute, concurrency, fn_constructor_args)
        args = _remote_args(num_cpus, num_gpus, memory, resources, dict(ray_remote_args))
        return self._with(P.MapOp(name=name, inputs=[self._plan], step=step, compute=strat,
                                  remote_args=args))

    def map(self, fn: Callable[[dict[str, Any]], dict[str, Any]], *, compute: Any = None,
            fn_args: Any = None, fn_kwargs: Any = None, fn_constructor_args: Any = None,
            fn_constructor_kwargs: Any = None, num_cpus: float | None = None,
            num_gpus: float | None = None, memory: float | None = None, concurrency: Any = None,
            resources: dict[str, float] | None = None, **ray_remote_args: Any) -> Dataset:
        """Applies fn to every row (a dict); fn returns the new row."""
        _check_fn(fn, "map")
        name = f"Map({T.udf_name(fn)})"
        udf = T._UDF(fn, fn_args, fn_kwargs, fn_constructor_args, fn_constructor_kwargs)
        return self._map_op(name, T.MapRows(udf, name), fn, compute, concurrency, fn_constructor_args,
                            num_cpus, num_gpus, memory, resources, ray_remote_args)

    def map_batches(self, fn: Any, *, batch_size: int | None | str = None, compute: Any = None,
                    batch_format: str | None = "default", zero_copy_batch: bool = True,
                    fn_args: Any = None, fn_kwargs: Any = None, fn_constructor_args: Any = None,
                    fn_constructor_kwargs: Any = None, num_cpus: float | None = None,
                    num_gpus: float | None = None, memory: float | None = None,
                    concurrency: Any = None, udf_modifying_row_count: bool = True,
                    resources: dict[str, float] | None = None, **ray_remote_args: Any) -> Dataset:
        """Applies fn to batches of `batch_size` rows in `batch_format` ("default"/"numpy":
        dict of ndarrays, "pandas", "pyarrow"). A callable class runs on an actor pool
        (`concurrency=n` or `(min, max)`); `num_gpus` may be fractional."""
        _check_fn(fn, "map_batches")
        if batch_size == "auto":
            batch_size = None
        if batch_size is not None and (not isinstance(batch_size, int) or batch_size < 1):
            raise ValueError(f"batch_size must be a positive int or None, got {batch_size!r}")
        name = f"MapBatches({T.udf_name(fn)})"
        udf = T._UDF(fn, fn_args, fn_kwargs, fn_constructor_args, fn_constructor_kwargs)
        step = T.MapBatches(udf, name, batch_size, batch_format, zero_copy_batch)
        return self._map_op(name, step, fn, compute, concurrency, fn_constructor_args, num_cpus,
                            num_gpus, memory, resources, ray_remote_args)

    def flat_map(self, fn: Callable[[dict[str, Any]], list[dict[str, Any]]], *, compute: Any = None,
                 fn_args: Any = None, fn_kwargs: Any = None, fn_constructor_args: Any = None,
                 fn_constructor_kwargs: Any = None, num_cpus: float | None = None,
                 num_gpus: float | None = None, memory: float | None = None,
                 concurrency: Any = None, resources: dict[str, float] | None = None,
                 **ray_remote_args: Any) -> Dataset:
        """Applies fn to every row; fn returns a list of rows."""
        _check_fn(fn, "flat_map")
        name = f"FlatMap({T.udf_name(fn)})"
        udf = T._UDF(fn, fn_args, fn_kwargs, fn_constructor_args, fn_constructor_kwargs)
        return self._map_op(name, T.FlatMap(udf, name), fn, compute, concurrency,
                            fn_constructor_args, num_cpus, num_gpus, memory, resources, ray_remote_args)

    def filter(self, fn: Any = None, expr: Any = None, *, compute: Any = None, fn_args: Any = None,
               fn_kwargs: Any = None, fn_constructor_args: Any = None,
               fn_constructor_kwargs: Any = None, num_cpus: float | None = None,
               num_gpus: float | None = None, memory: float | None = None,
               concurrency: Any = None, resources: dict[str, float] | None = None,
               **ray_remote_args: Any) -> Dataset:
        """Keeps rows where fn(row) is true, or where `expr` holds (a string such as
        "score > 0.8 and lang == 'zh'", or a pyarrow.compute.Expression; pushed into parquet
        reads)."""
        if (fn is None) == (expr is None):
            raise ValueError("filter() takes exactly one of fn and expr")
        if expr is not None:
            from .expressions import to_arrow_expression

            e = to_arrow_expression(expr)
            name = f"Filter({expr if isinstance(expr, str) else repr(expr)})"
            return self._with(P.MapOp(name=name, inputs=[self._plan], step=T.FilterExpr(e, name),
                                      compute=TaskPoolStrategy(), remote_args={}))
        _check_fn(fn, "filter")
        name = f"Filter({T.udf_name(fn)})"
        udf = T._UDF(fn, fn_args, fn_kwargs, fn_constructor_args, fn_constructor_kwargs)
        return self._map_op(name, T.Filter(udf, name), fn, compute, concurrency, fn_constructor_args,
                            num_cpus, num_gpus, memory, resources, ray_remote_args)

    def with_column(self, column_name: str, expr: Any, **ray_remote_args: Any) -> Dataset:
        """Adds (or replaces) column `column_name` with the values of an expression
        (ember.data.expressions: `col("a") * 2 + lit(1)`), computed per block with Arrow."""
        return self.with_columns({column_name: expr}, **ray_remote_args)

    def with_columns(self, exprs: Any = None, *more_exprs: Any,
                     **ray_remote_args: Any) -> Dataset:
        """Adds or replaces several columns in one pass: {name: expression} mappings (in
        order), and `unnest(struct_expr)` arguments, which add one column per struct field."""
        from ._internal.expr_extra import UnnestExpr
        from .expressions import Expr

        parts: list[Any] = []
        for m in (exprs, *more_exprs):
            if m is None:
                continue
            if isinstance(m, UnnestExpr):
                parts.append(m)
                continue
            if not isinstance(m, dict):
                raise TypeError(f"with_columns() takes {{name: expression}} mappings or unnest() "
                                f"expressions, got {type(m).__name__}")
            for n, e in m.items():
                if not isinstance(n, str) or not n:
                    raise ValueError(f"a column name must be a non-empty string, got {n!r}")
                if not isinstance(e, Expr) or isinstance(e, UnnestExpr):
                    raise TypeError(f"the value for column {n!r} must be an "
                                    f"ember.data.expressions expression (col, lit, ...), got "
                                    f"{type(e).__name__}")
            parts.append(dict(m))
        if not parts:
            raise ValueError("with_columns() needs at least one expression")
        for k in ("compute", "num_cpus", "num_gpus", "memory", "resources", "label_selector",
                  "fallback_strategy", "max_calls", "accelerator_type", "runtime_env"):
            if ray_remote_args.get(k) is not None:
                raise ValueError(f"with_column(s): ember.data does not support {k!r} (expressions "
                                 "run in the default tasks)")
        if ray_remote_args:
            raise TypeError(f"with_column(s) got unexpected arguments {sorted(ray_remote_args)}")
        names = [n for p in parts for n in (p if isinstance(p, dict) else [repr(p)])]
        name = f"WithColumns({', '.join(names)})"
        return self._with(P.MapOp(name=name, inputs=[self._plan], step=T.WithColumns(parts, name),
                                  compute=TaskPoolStrategy(), remote_args={}))

    def add_column(self, col: str, fn: Callable[[Any], Any], *, batch_format: str | None = "pandas",
                   compute: Any = None, concurrency: Any = None, num_cpus: float | None = None,
                   num_gpus: float | None = None, memory: float | None = None,
                   **ray_remote_args: Any) -> Dataset:
        """Adds (or replaces) column `col` computed by fn(batch)."""
        _check_fn(fn, "add_column")

        def add(batch: Any) -> Any:
            values = fn(batch)
            if isinstance(batch, pa.Table):
                from .block import column_to_arrow

                arr = column_to_arrow(values)
                if col in batch.column_names:
                    return batch.set_column(batch.column_names.index(col), col, arr)
                return batch.append_column(col, arr)
            batch[col] = values
            return batch

        add.__name__ = f"add_column_{col}"
        return self.map_batches(add, batch_format=batch_format, compute=compute,
                                concurrency=concurrency, num_cpus=num_cpus, num_gpus=num_gpus,
                                memory=memory, zero_copy_batch=False, **ray_remote_args)

    def _project(self, name: str, **kw: Any) -> Dataset:
        return self._with(P.MapOp(name=name, inputs=[self._plan], step=T.Project(name=name, **kw),
                                  compute=TaskPoolStrategy(), remote_args={}))

    def select_columns(self, cols: str | list[str], **_: Any) -> Dataset:
        """Keeps only these columns (pushed into parquet reads)."""
        cols = [cols] if isinstance(cols, str) else list(cols)
        if len(set(cols)) != len(cols):
            raise ValueError(f"select_columns: duplicate columns in {cols}")
        return self._project("Project", select=cols)

    def drop_columns(self, cols: str | list[str], **_: Any) -> Dataset:
        """Removes these columns."""
        cols = [cols] if isinstance(cols, str) else list(cols)
        return self._project("Project", drop=cols)

    def rename_columns(self, names: list[str] | dict[str, str], **_: Any) -> Dataset:
        """Renames columns: a {old: new} dict (or a full list of new names)."""
        if isinstance(names, dict):
            return self._project("RenameColumns", rename=dict(names))
        new = list(names)
        return self.map_batches(lambda t: t.rename_columns(new), batch_format="pyarrow")

    def random_sample(self, fraction: float, *, seed: int | None = None) -> Dataset:
        """Keeps each row with probability `fraction`."""
        if not 0 <= fraction <= 1:
            raise ValueError(f"fraction must be between 0 and 1, got {fraction}")
        return self._with(P.MapOp(name="RandomSample", inputs=[self._plan],
                                  step=T.RandomSample(fraction, seed), compute=TaskPoolStrategy(),
                                  remote_args={}))

    # --- all-to-all ---------------------------------------------------------------------------
    def random_shuffle(self, *, seed: int | None = None, num_blocks: int | None = None,
                       **ray_remote_args: Any) -> Dataset:
        """Shuffles all rows (an all-to-all exchange: map tasks cut, reduce tasks merge)."""
        return self._with(P.AllToAll(name="RandomShuffle", inputs=[self._plan], kind="random_shuffle",
                                     params={"seed": seed, "num_blocks": num_blocks},
                                     remote_args=ray_remote_args))

    def randomize_block_order(self, *, seed: int | None = None) -> Dataset:
        """Shuffles the order of blocks (rows within a block stay together)."""
        return self._with(P.AllToAll(name="RandomizeBlockOrder", inputs=[self._plan],
                                     kind="randomize_block_order", params={"seed": seed}))

    def repartition(self, num_blocks: int | None = None, target_num_rows_per_block: int | None = None,
                    *, strict: bool = False, shuffle: bool = False, keys: list[str] | None = None,
                    sort: bool = False) -> Dataset:
        """Reblocks into num_blocks blocks (adjacent rows together; `shuffle=True` spreads every
        input block over all outputs; `keys=[...]` hash-partitions rows by those columns, and
        `sort=True` then sorts each block by them), or into blocks of target_num_rows_per_block
        rows (`strict=True`: exactly that many in every block but the last)."""
        if (num_blocks is None) == (target_num_rows_per_block is None):
            raise ValueError("repartition() takes exactly one of num_blocks and target_num_rows_per_block")
        if num_blocks is not None and (not isinstance(num_blocks, int) or num_blocks < 1):
            raise ValueError(f"num_blocks must be an int >= 1, got {num_blocks!r}")
        if target_num_rows_per_block is not None:
            if shuffle:
                raise ValueError("`shuffle` must be False when `target_num_rows_per_block` is set.")
            if keys is not None or sort:  # as Ray: said, then ignored
                warnings.warn("`keys` and `sort` are ignored when `target_num_rows_per_block` is "
                              "set.", UserWarning, stacklevel=2)
                keys, sort = None, False
            if target_num_rows_per_block < 1:
                raise ValueError(f"target_num_rows_per_block must be >= 1, got "
                                 f"{target_num_rows_per_block}")
        elif strict:
            warnings.warn("`strict` is ignored when `target_num_rows_per_block` is not set.",
                          UserWarning, stacklevel=2)
        if sort and not keys:
            raise ValueError("repartition(sort=True) needs `keys` to sort the blocks by")
        if keys is not None:
            keys = [keys] if isinstance(keys, str) else list(keys)
            if not keys:
                raise ValueError("repartition(keys=...) needs at least one column")
            if shuffle:
                raise ValueError("repartition() takes `keys` (hash partitioning) or `shuffle`, "
                                 "not both")
            return self._with(P.AllToAll(name="Repartition", inputs=[self._plan],
                                         kind="hash_repartition",
                                         params={"num_blocks": num_blocks, "keys": keys,
                                                 "sort": sort}))
        return self._with(P.AllToAll(name="Repartition", inputs=[self._plan], kind="repartition",
                                     params={"num_blocks": num_blocks, "shuffle": shuffle,
                                             "target_num_rows_per_block": target_num_rows_per_block,
                                             "strict": strict}))

    def sort(self, key: str | list[str], descending: bool | list[bool] = False,
             boundaries: list[Any] | None = None) -> Dataset:
        """Sorts all rows by key(s)."""
        keys = [key] if isinstance(key, str) else list(key)
        if not keys:
            raise ValueError("sort() needs at least one key")
        desc = [descending] * len(keys) if isinstance(descending, bool) else list(descending)
        if len(desc) != len(keys):
            raise ValueError("descending must be a bool or one bool per key")
        return self._with(P.AllToAll(name="Sort", inputs=[self._plan], kind="sort",
                                     params={"keys": keys, "descending": desc, "reduce": "sort",
                                             "boundaries": boundaries}))

    def groupby(self, key: str | list[str] | None, num_partitions: int | None = None) -> Any:
        """Groups rows by key(s) for count/sum/min/max/mean/std/aggregate/map_groups."""
        from .grouped import GroupedData

        return GroupedData(self, key, num_partitions)

    def join(self, ds: Dataset, join_type: str, num_partitions: int, on: tuple[str, ...] = ("id",),
             right_on: tuple[str, ...] | None = None, left_suffix: str | None = None,
             right_suffix: str | None = None, *, partition_size_hint: int | None = None,
             aggregator_ray_remote_args: dict[str, Any] | None = None,
             validate_schemas: bool = False) -> Dataset:
        """Joins with `ds` on key columns (`on` here, `right_on` there): join_type is one of
        inner, left_outer, right_outer, full_outer, left_semi, right_semi, left_anti,
        right_anti. Both sides are hash-partitioned into num_partitions by key and each
        partition is joined in its own task (num_partitions output blocks)."""
        from ._internal.join import JOIN_TYPES

        if not isinstance(ds, Dataset):
            raise TypeError(f"join() expects a Dataset to join with, got {type(ds).__name__}")
        if join_type not in JOIN_TYPES:
            raise ValueError(f"join_type must be one of {sorted(JOIN_TYPES)}, got {join_type!r}")
        if not isinstance(num_partitions, int) or num_partitions < 1:
            raise ValueError(f"num_partitions must be an int >= 1, got {num_partitions!r}")
        left_on = [on] if isinstance(on, str) else list(on)
        r_on = left_on if right_on is None else [right_on] if isinstance(right_on, str) \
            else list(right_on)
        if not left_on or len(left_on) != len(r_on):
            raise ValueError(f"join: on {left_on} and right_on {r_on} must name the same number "
                             "(>= 1) of key columns")
        if validate_schemas:
            from ._internal.join import check_columns

            ls, rs = self.schema(), ds.schema()
            check_columns(ls.names if ls else [], rs.names if rs else [], join_type, left_on,
                          r_on, left_suffix, right_suffix)
        params = {"join_type": join_type, "num_partitions": num_partitions, "on": left_on,
                  "right_on": r_on, "left_suffix": left_suffix, "right_suffix": right_suffix}
        return self._with(P.AllToAll(name=f"Join({join_type})", inputs=[self._plan, ds._plan],
                                     kind="join", params=params,
                                     remote_args=dict(aggregator_ray_remote_args or {})))

    def union(self, *other: Dataset) -> Dataset:
        """The rows of this dataset and then of the others."""
        for o in other:
            if not isinstance(o, Dataset):
                raise TypeError(f"union() expects Datasets, got {type(o).__name__}")
        return self._with(P.Union(name="Union", inputs=[self._plan] + [o._plan for o in other]))

    def zip(self, *other: Dataset) -> Dataset:
        """Columns of both datasets side by side (same number of rows; clashing names get _1)."""
        if len(other) != 1:
            raise ValueError("zip() takes exactly one other dataset")
        return self._with(P.Zip(name="Zip", inputs=[self._plan, other[0]._plan]))

    def limit(self, limit: int) -> Dataset:
        """The first `limit` rows (upstream stops reading once they are produced)."""
        if not isinstance(limit, int) or limit < 0:
            raise ValueError(f"limit must be an int >= 0, got {limit!r}")
        return self._with(P.Limit(name=f"limit={limit}", inputs=[self._plan], limit=limit))

    # --- writes -------------------------------------------------------------------------------
    def _write(self, fmt: str, path: str, filesystem: Any, try_create_dir: bool,
               options: dict[str, Any], *, column: str | None = None,
               partition_cols: list[str] | None = None, ray_remote_args: dict[str, Any] | None = None,
               arrow_open_stream_args: dict[str, Any] | None = None, filename_provider: Any = None,
               options_fn: Any = None, min_rows_per_file: int | None = None,
               num_rows_per_file: int | None = None, concurrency: int | None = None,
               mode: Any = "append") -> None:
        from ._internal.datasource.sinks import FileDatasink
        from ._internal.write import run_write

        if num_rows_per_file is not None:  # Ray's older name for min_rows_per_file
            if min_rows_per_file is not None:
                raise ValueError("give min_rows_per_file or num_rows_per_file (its older "
                                 "name), not both")
            min_rows_per_file = num_rows_per_file
        if options_fn is not None and not callable(options_fn):
            raise TypeError(f"the *_args_fn argument must be callable, got "
                            f"{type(options_fn).__name__}")
        sink = FileDatasink(path, fmt, filesystem, options, try_create_dir, column, partition_cols,
                            mode=mode, filename_provider=filename_provider,
                            open_stream_args=arrow_open_stream_args, options_fn=options_fn)
        stats = run_write(self._plan, sink, f"Write{sink.get_name()}", ray_remote_args,
                          concurrency, min_rows_per_file)
        if stats is not None:
            self._last_stats = stats

    def write_datasink(self, datasink: Any, *, ray_remote_args: dict[str, Any] | None = None,
                       concurrency: int | None = None) -> None:
        """Writes the rows into a user-defined `ember.data.Datasink` (on_write_start, then
        write(blocks, ctx) per task, then on_write_complete or on_write_failed)."""
        from ._internal.write import run_write
        from .datasource import Datasink

        if not isinstance(datasink, Datasink):
            raise TypeError("write_datasink() expects an ember.data.Datasink, got "
                            f"{type(datasink).__name__}")
        stats = run_write(self._plan, datasink, f"Write{datasink.get_name()}", ray_remote_args,
                          concurrency, datasink.min_rows_per_write)
        if stats is not None:
            self._last_stats = stats

    def write_parquet(self, path: str, *, partition_cols: list[str] | None = None,
                      filesystem: Any = None, try_create_dir: bool = True,
                      arrow_open_stream_args: dict[str, Any] | None = None, filename_provider: Any = None,
                      arrow_parquet_args_fn: Any = None, min_rows_per_file: int | None = None,
                      max_rows_per_file: int | None = None, ray_remote_args: dict[str, Any] | None = None,
                      concurrency: int | None = None, num_rows_per_file: int | None = None,
                      mode: Any = "append", **arrow_parquet_args: Any) -> None:
        """Writes the rows as parquet files under path (a directory or a URI such as s3://...).
        `mode`: append / overwrite / error / ignore (Ray's SaveMode); `min_rows_per_file`: at
        least that many rows per file; `filename_provider`: names the files;
        `arrow_parquet_args` (and what `arrow_parquet_args_fn()` returns) go to ParquetWriter."""
        if max_rows_per_file is not None:
            raise ValueError("write_parquet: ember.data does not support max_rows_per_file")
        self._write("parquet", path, filesystem, try_create_dir, arrow_parquet_args,
                    partition_cols=partition_cols, ray_remote_args=ray_remote_args,
                    arrow_open_stream_args=arrow_open_stream_args,
                    filename_provider=filename_provider, options_fn=arrow_parquet_args_fn,
                    min_rows_per_file=min_rows_per_file, num_rows_per_file=num_rows_per_file,
                    concurrency=concurrency, mode=mode)

    def write_json(self, path: str, *, filesystem: Any = None, try_create_dir: bool = True,
                   arrow_open_stream_args: dict[str, Any] | None = None, filename_provider: Any = None,
                   pandas_json_args_fn: Any = None, min_rows_per_file: int | None = None,
                   ray_remote_args: dict[str, Any] | None = None, concurrency: int | None = None,
                   num_rows_per_file: int | None = None, mode: Any = "append",
                   **pandas_json_args: Any) -> None:
        """Writes the rows as JSON lines files under path (`pandas_json_args` go to
        DataFrame.to_json; other options as write_parquet)."""
        self._write("json", path, filesystem, try_create_dir, pandas_json_args,
                    ray_remote_args=ray_remote_args, arrow_open_stream_args=arrow_open_stream_args,
                    filename_provider=filename_provider, options_fn=pandas_json_args_fn,
                    min_rows_per_file=min_rows_per_file, num_rows_per_file=num_rows_per_file,
                    concurrency=concurrency, mode=mode)

    def write_csv(self, path: str, *, filesystem: Any = None, try_create_dir: bool = True,
                  arrow_open_stream_args: dict[str, Any] | None = None, filename_provider: Any = None,
                  arrow_csv_args_fn: Any = None, min_rows_per_file: int | None = None,
                  ray_remote_args: dict[str, Any] | None = None, concurrency: int | None = None,
                  num_rows_per_file: int | None = None, mode: Any = "append",
                  **arrow_csv_args: Any) -> None:
        """Writes the rows as CSV files under path (`arrow_csv_args`, e.g. write_options, go to
        pyarrow.csv.CSVWriter; other options as write_parquet)."""
        self._write("csv", path, filesystem, try_create_dir, arrow_csv_args,
                    ray_remote_args=ray_remote_args, arrow_open_stream_args=arrow_open_stream_args,
                    filename_provider=filename_provider, options_fn=arrow_csv_args_fn,
                    min_rows_per_file=min_rows_per_file, num_rows_per_file=num_rows_per_file,
                    concurrency=concurrency, mode=mode)

    def write_numpy(self, path: str, *, column: str, filesystem: Any = None,
                    try_create_dir: bool = True, arrow_open_stream_args: dict[str, Any] | None = None,
                    filename_provider: Any = None, min_rows_per_file: int | None = None,
                    ray_remote_args: dict[str, Any] | None = None, concurrency: int | None = None,
                    num_rows_per_file: int | None = None, mode: Any = "append") -> None:
        """Writes one column as .npy files under path (options as write_parquet)."""
        self._write("numpy", path, filesystem, try_create_dir, {}, column=column,
                    ray_remote_args=ray_remote_args, arrow_open_stream_args=arrow_open_stream_args,
                    filename_provider=filename_provider, min_rows_per_file=min_rows_per_file,
                    num_rows_per_file=num_rows_per_file, concurrency=concurrency, mode=mode)

    # --- execution ----------------------------------------------------------------------------
    def _iter_bundles(self) -> Iterator[Any]:
        """Executes the plan; yields RefBundles as they are produced."""
        from ._internal.executor import StreamingExecutor
        from .context import DataContext

        if isinstance(self._plan, P.InputData):
            yield from self._plan.bundles
            return
        ctx = DataContext.get_current().copy()
        phys = P.to_physical(P.optimize(self._plan))
        ex = StreamingExecutor(phys, ctx, self._uuid)
        self._last_stats = ex.stats
        yield from ex.run()


class MaterializedDataset(Dataset):
    """A dataset whose blocks are already in the object store."""


def _check_fn(fn: Any, what: str) -> None:
    if not callable(fn):
        raise TypeError(f"{what}() expects a function or a callable class, got {type(fn).__name__}")
