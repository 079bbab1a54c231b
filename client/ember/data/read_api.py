"""Creating datasets: read_* (lazy, read by tasks) and from_* (data put from the driver)."""
from __future__ import annotations

import functools
from typing import Any, Iterator

import numpy as np
import pyarrow as pa

import ember

from . import block as B
from ._internal import plan as P
from ._internal.datasource.file_based import FileDatasource, ParquetDatasource, ReadTask
from ._internal.operators import RefBundle
from .dataset import Dataset, MaterializedDataset


def _read(ds: Any, name: str, parallelism: int, override_num_blocks: int | None,
          concurrency: int | None, num_cpus: Any, num_gpus: Any, memory: Any,
          ray_remote_args: dict[str, Any] | None) -> Dataset:
    ra = dict(ray_remote_args or {})
    for k, v in (("num_cpus", num_cpus), ("num_gpus", num_gpus), ("memory", memory)):
        if v is not None:
            ra[k] = v
    par = override_num_blocks or parallelism
    return Dataset(P.Read(name=name, inputs=[], datasource=ds, parallelism=par, remote_args=ra,
                          concurrency=concurrency))


def _refuse(fn: str, **given: Any) -> None:
    """Ray parameters Ember does not implement: an error naming the first one that is set."""
    for k, v in given.items():
        if v is not None:
            raise ValueError(f"{fn}: ember.data does not support {k!r}")


def _only(fn: str, kwargs: dict[str, Any], allowed: tuple[str, ...], what: str) -> dict[str, Any]:
    bad = sorted(set(kwargs) - set(allowed))
    if bad:
        raise TypeError(f"{fn}() got unexpected arguments {bad} ({what} takes {list(allowed)})")
    return kwargs


def _partitioning(p: Any) -> Any:
    """False (no partition columns), True (hive) or an ember.data.datasource.Partitioning."""
    from ._internal.datasource.partitioning import Partitioning

    if p is None or p is False:
        return False
    if isinstance(p, Partitioning):
        return p
    if p in ("hive", True, "default"):
        return True
    raise ValueError(f"partitioning must be None, 'hive' or an ember.data.datasource."
                     f"Partitioning, got {p!r}")


def read_parquet(paths: str | list[str], *, filesystem: Any = None, columns: list[str] | None = None,
                 parallelism: int = -1, num_cpus: float | None = None, num_gpus: float | None = None,
                 memory: float | None = None, ray_remote_args: dict[str, Any] | None = None,
                 tensor_column_schema: dict[str, Any] | None = None, meta_provider: Any = None,
                 partition_filter: Any = None, partitioning: Any = "hive", shuffle: Any = None,
                 include_paths: bool = False, file_extensions: list[str] | None = ["parquet"],  # noqa: B006
                 ignore_missing_paths: bool = False, concurrency: int | None = None,
                 override_num_blocks: int | None = None, **arrow_parquet_args: Any) -> Dataset:
    """Parquet files (local, s3://, any pyarrow.fs URI); `columns` and `filter=` (a pyarrow
    expression) are pushed down into the reader, row groups pruned by their statistics."""
    _refuse("read_parquet", tensor_column_schema=tensor_column_schema,
            meta_provider=meta_provider, partition_filter=partition_filter)
    flt = arrow_parquet_args.pop("filter", None)
    if arrow_parquet_args:
        raise TypeError(f"read_parquet() got unsupported arguments {sorted(arrow_parquet_args)}")
    ds = ParquetDatasource(paths, filesystem, columns, flt, include_paths, file_extensions,
                           ignore_missing_paths, _partitioning(partitioning), shuffle)
    return _read(ds, "ReadParquet", parallelism, override_num_blocks, concurrency, num_cpus,
                 num_gpus, memory, ray_remote_args)


def _file_read(fmt: str, name: str, paths: Any, filesystem: Any, options: dict[str, Any], include_paths: bool,
               file_extensions: Any, ignore_missing_paths: bool, partitioning: Any, shuffle: Any,
               parallelism: int, override_num_blocks: int | None, concurrency: int | None,
               num_cpus: Any, num_gpus: Any, memory: Any, ray_remote_args: dict[str, Any] | None,
               arrow_open_stream_args: dict[str, Any] | None = None, meta_provider: Any = None,
               partition_filter: Any = None) -> Dataset:
    fn = {"ReadJSON": "read_json", "ReadCSV": "read_csv", "ReadText": "read_text",
          "ReadBinary": "read_binary_files", "ReadNumpy": "read_numpy"}[name]
    _refuse(fn, meta_provider=meta_provider, partition_filter=partition_filter)
    if arrow_open_stream_args is not None:
        if not isinstance(arrow_open_stream_args, dict):
            raise TypeError(f"{fn}: arrow_open_stream_args must be a dict, got "
                            f"{type(arrow_open_stream_args).__name__}")
        options = {**options, "open_stream_args": dict(arrow_open_stream_args)}
    ds = FileDatasource(paths, fmt, filesystem, options, include_paths, file_extensions,
                        ignore_missing_paths, _partitioning(partitioning), shuffle)
    return _read(ds, name, parallelism, override_num_blocks, concurrency, num_cpus, num_gpus,
                 memory, ray_remote_args)


_JSON_EXT = ["json", "jsonl", "json.gz", "jsonl.gz", "json.br", "jsonl.br", "json.zst",
             "jsonl.zst", "json.lz4", "jsonl.lz4"]


def read_json(paths: str | list[str], *, lines: bool = False, filesystem: Any = None,
              parallelism: int = -1, num_cpus: float | None = None, num_gpus: float | None = None,
              memory: float | None = None, ray_remote_args: dict[str, Any] | None = None,
              arrow_open_stream_args: dict[str, Any] | None = None, meta_provider: Any = None,
              partition_filter: Any = None, partitioning: Any = "hive", include_paths: bool = False,
              ignore_missing_paths: bool = False, shuffle: Any = None,
              file_extensions: list[str] | None = _JSON_EXT, concurrency: int | None = None,
              override_num_blocks: int | None = None, **arrow_json_args: Any) -> Dataset:
    """JSON lines files and files holding one JSON array of objects (`read_options`,
    `parse_options`: pyarrow.json's)."""
    _only("read_json", arrow_json_args, ("read_options", "parse_options"), "pyarrow.json")
    return _file_read("json", "ReadJSON", paths, filesystem, arrow_json_args, include_paths,
                      file_extensions, ignore_missing_paths, partitioning, shuffle, parallelism,
                      override_num_blocks, concurrency, num_cpus, num_gpus, memory, ray_remote_args,
                      arrow_open_stream_args, meta_provider, partition_filter)


def read_csv(paths: str | list[str], *, filesystem: Any = None, parallelism: int = -1,
             num_cpus: float | None = None, num_gpus: float | None = None, memory: float | None = None,
             ray_remote_args: dict[str, Any] | None = None, arrow_open_stream_args: dict[str, Any] | None = None,
             meta_provider: Any = None, partition_filter: Any = None,
             partitioning: Any = "hive", include_paths: bool = False, ignore_missing_paths: bool = False,
             shuffle: Any = None, file_extensions: list[str] | None = None,
             concurrency: int | None = None, override_num_blocks: int | None = None,
             **arrow_csv_args: Any) -> Dataset:
    """CSV files (pyarrow.csv options: read_options, parse_options, convert_options)."""
    _only("read_csv", arrow_csv_args, ("read_options", "parse_options", "convert_options"),
          "pyarrow.csv")
    return _file_read("csv", "ReadCSV", paths, filesystem, arrow_csv_args, include_paths,
                      file_extensions, ignore_missing_paths, partitioning, shuffle, parallelism,
                      override_num_blocks, concurrency, num_cpus, num_gpus, memory, ray_remote_args,
                      arrow_open_stream_args, meta_provider, partition_filter)


def read_text(paths: str | list[str], *, encoding: str = "utf-8", drop_empty_lines: bool = True,
              filesystem: Any = None, parallelism: int = -1, num_cpus: float | None = None,
              num_gpus: float | None = None, memory: float | None = None,
              ray_remote_args: dict[str, Any] | None = None, arrow_open_stream_args: dict[str, Any] | None = None,
              meta_provider: Any = None, partition_filter: Any = None, partitioning: Any = None,
              include_paths: bool = False, ignore_missing_paths: bool = False, shuffle: Any = None,
              file_extensions: list[str] | None = None, concurrency: int | None = None,
              override_num_blocks: int | None = None) -> Dataset:
    """One row per line of text files (column "text")."""
    return _file_read("text", "ReadText", paths, filesystem,
                      {"encoding": encoding, "drop_empty_lines": drop_empty_lines}, include_paths,
                      file_extensions, ignore_missing_paths, partitioning, shuffle, parallelism,
                      override_num_blocks, concurrency, num_cpus, num_gpus, memory, ray_remote_args,
                      arrow_open_stream_args, meta_provider, partition_filter)


def read_binary_files(paths: str | list[str], *, include_paths: bool = False, filesystem: Any = None,
                      parallelism: int = -1, num_cpus: float | None = None,
                      num_gpus: float | None = None, memory: float | None = None,
                      ray_remote_args: dict[str, Any] | None = None,
                      arrow_open_stream_args: dict[str, Any] | None = None, meta_provider: Any = None,
                      partition_filter: Any = None, partitioning: Any = None,
                      ignore_missing_paths: bool = False, shuffle: Any = None,
                      file_extensions: list[str] | None = None, concurrency: int | None = None,
                      override_num_blocks: int | None = None) -> Dataset:
    """One row per file (column "bytes", and "path" with include_paths)."""
    return _file_read("binary", "ReadBinary", paths, filesystem, {}, include_paths, file_extensions,
                      ignore_missing_paths, partitioning, shuffle, parallelism, override_num_blocks,
                      concurrency, num_cpus, num_gpus, memory, ray_remote_args,
                      arrow_open_stream_args, meta_provider, partition_filter)


def read_numpy(paths: str | list[str], *, filesystem: Any = None, parallelism: int = -1,
               arrow_open_stream_args: dict[str, Any] | None = None, meta_provider: Any = None,
               partition_filter: Any = None, partitioning: Any = None, include_paths: bool = False,
               ignore_missing_paths: bool = False, shuffle: Any = None,
               file_extensions: list[str] | None = ["npy"], concurrency: int | None = None,  # noqa: B006
               override_num_blocks: int | None = None, **numpy_load_args: Any) -> Dataset:
    """.npy files; one row per first-axis entry (column "data"); `numpy_load_args`
    (allow_pickle, ...) go to numpy.load."""
    _only("read_numpy", numpy_load_args, ("allow_pickle", "fix_imports", "encoding",
                                          "max_header_size"), "numpy.load")
    return _file_read("numpy", "ReadNumpy", paths, filesystem, {"numpy_load_args": numpy_load_args},
                      include_paths, file_extensions, ignore_missing_paths, partitioning, shuffle,
                      parallelism, override_num_blocks, concurrency, None, None, None, None,
                      arrow_open_stream_args, meta_provider, partition_filter)


def read_datasource(datasource: Any, *, parallelism: int = -1, num_cpus: float | None = None,
                    num_gpus: float | None = None, memory: float | None = None,
                    ray_remote_args: dict[str, Any] | None = None, concurrency: int | None = None,
                    override_num_blocks: int | None = None, **read_args: Any) -> Dataset:
    """A dataset read from a user-defined `ember.data.Datasource` (its get_read_tasks)."""
    from .datasource import Datasource, _SourceAdapter

    if not isinstance(datasource, Datasource):
        raise TypeError("read_datasource() expects an ember.data.Datasource, got "
                        f"{type(datasource).__name__}")
    if read_args:
        raise TypeError(f"read_datasource() got unexpected arguments {sorted(read_args)} (Ray "
                        "passes these to the deprecated Datasource.create_reader, which ember.data "
                        "does not support)")
    return _read(_SourceAdapter(datasource), f"Read{datasource.get_name()}", parallelism,
                 override_num_blocks, concurrency, num_cpus, num_gpus, memory, ray_remote_args)


def read_sql(sql: str, connection_factory: Any, *, shard_keys: list[str] | None = None,
             shard_hash_fn: str = "MD5", parallelism: int = -1, num_cpus: float | None = None,
             num_gpus: float | None = None, memory: float | None = None,
             ray_remote_args: dict[str, Any] | None = None, concurrency: int | None = None,
             override_num_blocks: int | None = None) -> Dataset:
    """The rows of a SQL query; `connection_factory()` returns a DB-API 2 connection (called
    in the driver and in every read task). Paged into parallel tasks with LIMIT/OFFSET where
    the database supports it, else read by one task."""
    from ._internal.datasource.sql import SQLDatasource

    _refuse("read_sql", shard_keys=shard_keys)
    if shard_hash_fn != "MD5":
        raise ValueError("read_sql: shard_hash_fn applies to shard_keys, which ember.data does "
                         "not support")
    return _read(SQLDatasource(sql, connection_factory), "ReadSQL", parallelism,
                 override_num_blocks, concurrency, num_cpus, num_gpus, memory, ray_remote_args)


# --- generated data ------------------------------------------------------------------------

def _range_block(start: int, stop: int, shape: tuple[int, ...] | None) -> Iterator[pa.Table]:
    ids = np.arange(start, stop, dtype=np.int64)
    if shape is None:
        yield pa.table({"id": ids})
    else:
        data = np.broadcast_to(ids.reshape((-1,) + (1,) * len(shape)), (len(ids), *shape)).copy()
        yield pa.table({"data": B.column_to_arrow(data)})


class RangeDatasource:
    """Rows 0..n-1 generated by the read tasks."""

    supports_projection_pushdown = False
    supports_filter_pushdown = False

    def __init__(self, n: int, shape: tuple[int, ...] | None = None) -> None:
        if not isinstance(n, (int, np.integer)) or n < 0:
            raise ValueError(f"range() needs an int n >= 0, got {n!r}")
        self.n = int(n)
        self.shape = tuple(shape) if shape is not None else None
        self.include_paths = False

    def num_rows(self) -> int:
        return self.n

    def get_read_tasks(self, parallelism: int, columns: Any = None, filter: Any = None) -> list[ReadTask]:
        k = max(1, min(parallelism, self.n)) if self.n else 1
        row_bytes = 8 * int(np.prod(self.shape)) if self.shape else 8
        tasks = []
        bounds = np.linspace(0, self.n, k + 1).astype(np.int64)
        for a, b in zip(bounds, bounds[1:], strict=False):
            fn = functools.partial(_range_block, int(a), int(b), self.shape)
            tasks.append(ReadTask(fn, [], int(b - a), int(b - a) * row_bytes))
        return tasks


def range(n: int, *, parallelism: int = -1, concurrency: int | None = None,  # noqa: A001
          override_num_blocks: int | None = None) -> Dataset:
    """Rows {"id": 0} .. {"id": n-1}."""
    return _read(RangeDatasource(n), "ReadRange", parallelism, override_num_blocks, concurrency,
                 None, None, None, None)


def range_tensor(n: int, *, shape: tuple[int, ...] = (1,), parallelism: int = -1,
                 concurrency: int | None = None, override_num_blocks: int | None = None) -> Dataset:
    """Rows {"data": full(shape, i)} for i in 0..n-1."""
    return _read(RangeDatasource(n, shape), "ReadRangeTensor", parallelism, override_num_blocks,
                 concurrency, None, None, None, None)


# --- from driver data ----------------------------------------------------------------------

def _from_blocks(blocks: list[pa.Table], name: str) -> MaterializedDataset:
    bundles = [RefBundle(ember.put(b), B.metadata_of(b)) for b in blocks]
    return MaterializedDataset(P.InputData(name=name, inputs=[], bundles=bundles))


def _num_blocks(n: int, parallelism: int, override: int | None) -> int:
    want = override or (parallelism if parallelism and parallelism > 0 else 0)
    if not want:
        want = 200 if n > 200 * 1024 else max(1, min(n, 8))
    return max(1, min(want, max(n, 1)))


def from_items(items: list[Any], *, parallelism: int = -1,
               override_num_blocks: int | None = None) -> MaterializedDataset:
    """A dataset of Python values (dicts become rows, anything else is column "item")."""
    if not isinstance(items, (list, tuple)):
        raise TypeError(f"from_items() expects a list, got {type(items).__name__}")
    items = list(items)
    k = _num_blocks(len(items), parallelism, override_num_blocks)
    bounds = np.linspace(0, len(items), k + 1).astype(int)
    return _from_blocks([B.rows_to_block(items[a:b]) for a, b in zip(bounds, bounds[1:], strict=False)
                         if b > a] or [pa.table({})], "FromItems")


def _resplit(tables: list[pa.Table], override_num_blocks: int | None) -> list[pa.Table]:
    """The tables as they are, or their rows cut into `override_num_blocks` blocks of near-equal
    size (zero-copy slices)."""
    if override_num_blocks is None:
        return tables
    if not isinstance(override_num_blocks, int) or override_num_blocks < 1:
        raise ValueError(f"override_num_blocks must be a positive int, got {override_num_blocks!r}")
    whole = pa.concat_tables(tables, promote_options="default") if len(tables) > 1 else tables[0]
    n = whole.num_rows
    k = max(1, min(override_num_blocks, n))
    bounds = [n * i // k for i in builtins_range(k + 1)]
    return [whole.slice(a, b - a) for a, b in zip(bounds, bounds[1:], strict=False)]


def from_pandas(dfs: Any, override_num_blocks: int | None = None) -> MaterializedDataset:
    """A dataset of one or more pandas DataFrames (one block each, or `override_num_blocks`)."""
    dfs = dfs if isinstance(dfs, list) else [dfs]
    return _from_blocks(_resplit([B.pandas_to_block(df) for df in dfs], override_num_blocks), "FromPandas")


def from_numpy(ndarrays: Any) -> MaterializedDataset:
    """A dataset of one or more ndarrays (column "data"; one block each)."""
    arrs = ndarrays if isinstance(ndarrays, list) else [ndarrays]
    return _from_blocks([pa.table({"data": B.column_to_arrow(np.asarray(a))}) for a in arrs],
                        "FromNumpy")


def from_arrow(tables: Any, *, override_num_blocks: int | None = None) -> MaterializedDataset:
    """A dataset of one or more Arrow tables (one block each, or `override_num_blocks`)."""
    tbls = tables if isinstance(tables, list) else [tables]
    for t in tbls:
        if not isinstance(t, pa.Table):
            raise TypeError(f"from_arrow() expects pyarrow Tables, got {type(t).__name__}")
    return _from_blocks(_resplit(tbls, override_num_blocks), "FromArrow")


def from_huggingface(dataset: Any, parallelism: int = -1, concurrency: int | None = None,
                     override_num_blocks: int | None = None) -> Any:
    """A dataset of a Hugging Face `datasets.Dataset` (its Arrow table, already in memory:
    materialized, cut into `override_num_blocks` blocks) or `datasets.IterableDataset` (read
    lazily by one task, in batches). A `DatasetDict` is refused: pick a split."""
    import datasets as hf

    if isinstance(dataset, (hf.DatasetDict, hf.IterableDatasetDict)):
        raise TypeError("from_huggingface() got a DatasetDict with splits "
                        f"{sorted(dataset.keys())}: pass one split, e.g. dataset['train']")
    if isinstance(dataset, hf.IterableDataset):
        from .datasource import Datasource, ReadTask

        class _HFIterable(Datasource):
            def get_name(self) -> str:
                return "HuggingFace"

            def estimate_inmemory_data_size(self) -> int | None:
                return None

            def get_read_tasks(self, parallelism: int) -> list[ReadTask]:
                def read() -> Iterator[pa.Table]:
                    for batch in dataset.with_format("arrow").iter(batch_size=4096):
                        yield batch

                # rows and size unknown before reading (None, as Ray's BlockMetadata allows)
                unknown = B.BlockMetadata(num_rows=None, size_bytes=None)  # type: ignore[arg-type]
                return [ReadTask(read, unknown)]

        return read_datasource(_HFIterable(), parallelism=parallelism, concurrency=concurrency,
                               override_num_blocks=override_num_blocks)
    if not isinstance(dataset, hf.Dataset):
        raise TypeError("from_huggingface() expects a datasets.Dataset or datasets.IterableDataset, "
                        f"got {type(dataset).__name__}")
    if parallelism != -1 or concurrency is not None:
        raise ValueError("from_huggingface(): parallelism and concurrency apply to an IterableDataset "
                         "only; a Dataset is already in memory (use override_num_blocks)")
    flat = dataset.flatten_indices() if dataset._indices is not None else dataset  # a select/shuffle view
    table = flat.data.table.combine_chunks()
    return _from_blocks(_resplit([table], override_num_blocks or max(1, min(8, table.num_rows))),
                        "FromHuggingFace")


def from_torch(dataset: Any, local_read: bool = False) -> MaterializedDataset:
    """A dataset of a torch map-style Dataset's items (column "item")."""
    items = [dataset[i] for i in builtins_range(len(dataset))]
    return from_items([{"item": _to_np(x)} for x in items])


def _to_np(x: Any) -> Any:
    try:
        import torch

        if isinstance(x, torch.Tensor):
            return x.numpy()
        if isinstance(x, tuple):
            return tuple(_to_np(v) for v in x)
    except ImportError:
        pass
    return x


import builtins as _builtins  # noqa: E402

builtins_range = _builtins.range
