"""File datasources: parquet (row-group splitting, column projection and row filters pushed down
to pyarrow), JSON (lines or arrays), CSV, text, binary files and .npy files; images, WebDataset
shards and TFRecords through the readers of their own modules."""
from __future__ import annotations

import functools
import io
import json
from typing import Any, Callable, Iterator, Sequence

import numpy as np
import pyarrow as pa

from ember.data import block as B

from ..sizing import group_pieces
from .partitioning import parse as partition_values
from .paths import expand_paths


class ReadTask:
    """One read task: a picklable callable yielding Arrow tables, with size estimates."""

    def __init__(self, fn: Callable[[], Iterator[pa.Table]], input_files: list[str],
                 est_num_rows: int | None, est_size_bytes: int) -> None:
        self.fn = fn
        self.input_files = input_files
        self.est_num_rows = est_num_rows
        self.est_size_bytes = est_size_bytes

    def __call__(self) -> Iterator[pa.Table]:
        return self.fn()


def _finish(tbl: pa.Table, path: str, parts: dict[str, Any], include_paths: bool,
            columns: list[str] | None, filter: Any) -> pa.Table:
    for k, v in parts.items():
        if k not in tbl.column_names:
            typ = pa.string() if isinstance(v, str) else None
            tbl = tbl.append_column(k, pa.array([v] * tbl.num_rows, type=typ))
    if include_paths:
        tbl = tbl.append_column("path", pa.array([path] * tbl.num_rows, type=pa.string()))
    if filter is not None and tbl.num_rows:
        tbl = tbl.filter(filter)
    if columns is not None:
        missing = [c for c in columns if c not in tbl.column_names]
        if missing:
            raise KeyError(f"{path}: no column(s) {missing}; the file has {tbl.column_names}")
        tbl = tbl.select(columns)
    return tbl


def _read_files(reader: Callable[[Any, str, dict[str, Any]], Any], fs: Any,
                files: list[tuple[str, str]], opts: dict[str, Any], include_paths: bool,
                columns: list[str] | None, filter: Any, partitioning: Any) -> Iterator[pa.Table]:
    """The files' tables; a reader returns a table, or yields tables as it goes (a big
    WebDataset shard or TFRecord file is not held whole)."""
    for path, base in files:
        parts = partition_values(partitioning, path, base)
        try:
            out = reader(fs, path, opts)
            for tbl in [out] if isinstance(out, pa.Table) else out:
                yield _finish(tbl, path, parts, include_paths, columns, filter)
        except (pa.ArrowInvalid, ValueError, UnicodeDecodeError) as e:
            raise ValueError(f"cannot read {path}: {e}") from None


def _open(fs: Any, path: str, opts: dict[str, Any]) -> Any:
    kwargs = {"compression": "detect", **opts.get("open_stream_args", {})}
    return fs.open_input_stream(path, **kwargs)


def read_json_file(fs: Any, path: str, opts: dict[str, Any]) -> pa.Table:
    import pyarrow.json as pj

    with _open(fs, path, opts) as f:
        data = f.read()
    head = data.lstrip()[:1]
    if head == b"[":
        return B.rows_to_block(json.loads(data))
    if not data.strip():
        return pa.table({})
    kwargs = {k: v for k, v in opts.items() if k in ("read_options", "parse_options")}
    try:
        return pj.read_json(io.BytesIO(data), **kwargs)
    except pa.ArrowInvalid:
        if head == b"{" and data.count(b"\n") <= 1:
            return B.rows_to_block([json.loads(data)])
        raise


def read_csv_file(fs: Any, path: str, opts: dict[str, Any]) -> pa.Table:
    import pyarrow.csv as pcsv

    with _open(fs, path, opts) as f:
        return pcsv.read_csv(f, **{k: v for k, v in opts.items()
                                   if k in ("read_options", "parse_options", "convert_options")})


def read_text_file(fs: Any, path: str, opts: dict[str, Any]) -> pa.Table:
    with _open(fs, path, opts) as f:
        text = f.read().decode(opts.get("encoding", "utf-8"))
    lines = text.splitlines()
    if opts.get("drop_empty_lines", True):
        lines = [ln for ln in lines if ln.strip()]
    return pa.table({"text": pa.array(lines, type=pa.string())})


def read_binary_file(fs: Any, path: str, opts: dict[str, Any]) -> pa.Table:
    with _open(fs, path, opts) as f:
        return pa.table({"bytes": pa.array([f.read()], type=pa.binary())})


def read_numpy_file(fs: Any, path: str, opts: dict[str, Any]) -> pa.Table:
    with _open(fs, path, opts) as f:
        arr = np.load(io.BytesIO(f.read()), **opts.get("numpy_load_args", {}))
    return pa.table({"data": B.column_to_arrow(arr)})


def _media_readers() -> dict[str, Callable[[Any, str, dict[str, Any]], pa.Table]]:
    from .images import read_image_file
    from .tfrecords import read_tfrecords_file
    from .webdataset import read_webdataset_file

    return {"images": read_image_file, "webdataset": read_webdataset_file,
            "tfrecords": read_tfrecords_file}


READERS = {"json": read_json_file, "csv": read_csv_file, "text": read_text_file,
           "binary": read_binary_file, "numpy": read_numpy_file, **_media_readers()}


class FileDatasource:
    """Reads whole files with one of READERS; files are grouped into read tasks by size."""

    supports_projection_pushdown = False
    supports_filter_pushdown = False

    def __init__(self, paths: Any, fmt: str, filesystem: Any = None, options: dict[str, Any] | None = None,
                 include_paths: bool = False, file_extensions: list[str] | None = None,
                 ignore_missing_paths: bool = False, partitioning: Any = True,
                 shuffle: Any = None) -> None:
        self.fmt = fmt
        self.fs, self.files = expand_paths(paths, filesystem, file_extensions, ignore_missing_paths)
        self.options = dict(options or {})
        self.include_paths = include_paths
        self.partitioning = partitioning
        if shuffle == "files":
            import random

            random.shuffle(self.files)

    def estimate_inmemory_data_size(self) -> int:
        return sum(s for _, s, _ in self.files)

    def num_rows(self) -> int | None:
        return None

    def get_read_tasks(self, parallelism: int, columns: list[str] | None = None,
                       filter: Any = None) -> list[ReadTask]:
        sizes = [max(1, s) for _, s, _ in self.files]
        groups = group_pieces(sizes, max(1, sum(sizes) // max(1, parallelism)), parallelism)
        tasks = []
        for g in groups:
            files = [(self.files[i][0], self.files[i][2]) for i in g]
            fn = functools.partial(_read_files, READERS[self.fmt], self.fs, files, self.options,
                                   self.include_paths, columns, filter, self.partitioning)
            tasks.append(ReadTask(fn, [f for f, _ in files], None, sum(sizes[i] for i in g)))
        return tasks


def _read_parquet_pieces(fs: Any, pieces: list[tuple[str, str, list[int]]], columns: list[str] | None,
                         filter: Any, include_paths: bool, partitioning: Any,
                         batch_rows: int | None) -> Iterator[pa.Table]:
    import pyarrow.parquet as pq

    for path, base, rgs in pieces:
        parts = partition_values(partitioning, path, base)
        with fs.open_input_file(path) as f:
            pf = pq.ParquetFile(f)
            file_cols = pf.schema_arrow.names
            read_cols = None
            if columns is not None:
                # the projection plus whatever the filter names (a superset is harmless)
                text = str(filter) if filter is not None else ""
                read_cols = [c for c in file_cols if c in columns or (text and c in text)]
            tbl = pf.read_row_groups(rgs, columns=read_cols, use_threads=False)
        yield _finish(tbl, path, parts, include_paths, columns, filter)


SAMPLE_FILES = 3
SAMPLE_ROWS = 1024


class ParquetDatasource:
    """Parquet files split by row groups; projection and filters go to pyarrow."""

    supports_projection_pushdown = True
    supports_filter_pushdown = True

    def __init__(self, paths: Any, filesystem: Any = None, columns: list[str] | None = None,
                 filter: Any = None, include_paths: bool = False,
                 file_extensions: Sequence[str] | None = ("parquet",),
                 ignore_missing_paths: bool = False, partitioning: Any = True,
                 shuffle: Any = None) -> None:
        import pyarrow.parquet as pq

        self.fs, self.files = expand_paths(paths, filesystem, list(file_extensions or []) or None,
                                           ignore_missing_paths)
        self.columns = columns
        self.filter = filter
        self.include_paths = include_paths
        self.partitioning = partitioning
        self.meta = []
        for path, _size, _base in self.files:
            try:
                self.meta.append(pq.read_metadata(path, filesystem=self.fs))
            except (pa.ArrowInvalid, OSError) as e:
                raise ValueError(f"cannot read parquet file {path}: {e}") from None
        if shuffle == "files":
            import random

            order = list(range(len(self.files)))
            random.shuffle(order)
            self.files = [self.files[i] for i in order]
            self.meta = [self.meta[i] for i in order]

    def schema(self) -> pa.Schema:
        if not self.meta:
            return pa.schema([])
        full = self.meta[0].schema.to_arrow_schema()
        if self.columns is None:
            return full
        return pa.schema([full.field(c) for c in self.columns if c in full.names])

    def num_rows(self) -> int:
        return sum(m.num_rows for m in self.meta)

    def estimate_inmemory_data_size(self) -> int:
        return sum(self._rg_bytes(m, i, self.columns) for m in self.meta
                   for i in range(m.num_row_groups))

    def _rg_bytes(self, md: Any, i: int, columns: list[str] | None) -> int:
        """Bytes row group i takes in memory: its rows times the sampled bytes per row.

        The footer's sizes are sizes of the *encoded* pages: a dictionary- or RLE-encoded
        column takes bytes on disk where it takes megabytes in memory (a constant int64 column
        of 131072 rows: 568 bytes encoded, 1 MiB in memory), so they are used only when rows
        cannot be sampled."""
        per_row = self._bytes_per_row(columns)
        rg = md.row_group(i)
        if per_row is not None:
            return int(rg.num_rows * per_row)
        if columns is None:
            encoded: int = rg.total_byte_size
            return encoded
        total = 0
        for j in range(rg.num_columns):
            c = rg.column(j)
            if c.path_in_schema.split(".")[0] in columns:
                total += c.total_uncompressed_size
        return total

    def _bytes_per_row(self, columns: list[str] | None) -> float | None:
        """In-memory bytes per row of the projection, from up to SAMPLE_ROWS rows of the first
        row group of up to SAMPLE_FILES files spread over the dataset (cached)."""
        key = tuple(columns) if columns is not None else None
        cache: dict[tuple[str, ...] | None, float | None] = self.__dict__.setdefault("_per_row", {})
        if key in cache:
            return cache[key]
        import pyarrow.parquet as pq

        picks = sorted({int(k * (len(self.files) - 1) / max(1, SAMPLE_FILES - 1))
                        for k in range(min(SAMPLE_FILES, len(self.files)))})
        rows = nbytes = 0
        for k in picks:
            path, md = self.files[k][0], self.meta[k]
            if md.num_row_groups == 0 or md.num_rows == 0:
                continue
            try:
                with self.fs.open_input_file(path) as f:
                    pf = pq.ParquetFile(f)
                    cols = None if columns is None else [c for c in pf.schema_arrow.names
                                                         if c in columns]
                    batch = next(pf.iter_batches(batch_size=SAMPLE_ROWS, row_groups=[0],
                                                 columns=cols, use_threads=False), None)
            except (pa.ArrowInvalid, OSError, ValueError):
                continue
            if batch is not None and batch.num_rows:
                rows += batch.num_rows
                nbytes += batch.nbytes
        cache[key] = nbytes / rows if rows else None
        return cache[key]

    def _prune(self, path: str, md: Any, filter: Any) -> list[int]:
        rgs = list(range(md.num_row_groups))
        if filter is None:
            return rgs
        import pyarrow.dataset as pds

        try:
            frag = pds.ParquetFileFormat().make_fragment(path, filesystem=self.fs)
            kept = frag.split_by_row_group(filter, schema=md.schema.to_arrow_schema())
            return sorted(rg.id for k in kept for rg in k.row_groups)
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, KeyError):
            return rgs  # the filter names partition columns: no pruning, filter after reading

    def get_read_tasks(self, parallelism: int, columns: list[str] | None = None,
                       filter: Any = None) -> list[ReadTask]:
        columns = columns if columns is not None else self.columns
        if self.filter is not None:
            filter = self.filter if filter is None else (self.filter & filter)
        pieces: list[tuple[str, str, int, int, int]] = []  # path, base, rg, rows, bytes
        for (path, _size, base), md in zip(self.files, self.meta, strict=False):
            for i in self._prune(path, md, filter):
                pieces.append((path, base, i, md.row_group(i).num_rows, self._rg_bytes(md, i, columns)))
        from ember.data.context import DataContext

        target = DataContext.get_current().target_max_block_size
        if target is None:  # no size cut: group by the wanted parallelism only
            import sys

            target = sys.maxsize
        groups = group_pieces([max(1, p[4]) for p in pieces], target, parallelism)
        tasks = []
        for g in groups:
            by_file: dict[tuple[str, str], list[int]] = {}
            for i in g:
                by_file.setdefault((pieces[i][0], pieces[i][1]), []).append(pieces[i][2])
            spec = [(p, b, rgs) for (p, b), rgs in by_file.items()]
            fn = functools.partial(_read_parquet_pieces, self.fs, spec, columns, filter,
                                   self.include_paths, self.partitioning, None)
            rows = sum(pieces[i][3] for i in g) if filter is None else None
            tasks.append(ReadTask(fn, [p for p, _, _ in spec], rows, sum(pieces[i][4] for i in g)))
        return tasks
