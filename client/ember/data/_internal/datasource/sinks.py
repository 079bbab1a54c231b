"""Datasinks: one file per write task, written atomically, named so reruns never collide.

File names are `{write_uuid}_{task_uuid}_000000.{ext}`: a fresh uuid per `write_*` call and per
task, or what a `filename_provider` returns. On a local filesystem a file is written under a
hidden temporary name and renamed into place when complete; on object stores (S3) the upload
only becomes visible when it completes.

`mode` is Ray's SaveMode, applied once in the driver before any task runs (`on_write_start`):
append (the default) adds files, overwrite empties the directory first, error raises if it
exists, ignore writes nothing if it exists.
"""
from __future__ import annotations

import enum
import inspect
import logging
import uuid
from typing import Any, Callable, Iterator, Mapping

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs

from ember.data import block as B

from .paths import resolve_filesystem

logger = logging.getLogger(__name__)


class SaveMode(str, enum.Enum):
    """What a write does when its output path exists (Ray's SaveMode)."""

    APPEND = "append"
    OVERWRITE = "overwrite"
    IGNORE = "ignore"
    ERROR = "error"
    UPSERT = "upsert"


def save_mode(mode: Any) -> SaveMode:
    """`mode` as a SaveMode; a bad value raises naming the allowed ones."""
    try:
        m = SaveMode(mode.value if isinstance(mode, enum.Enum) else mode)
    except ValueError:
        raise ValueError(f"mode must be one of {[m.value for m in SaveMode]}, got "
                         f"{mode!r}") from None
    if m is SaveMode.UPSERT:
        raise ValueError("mode='upsert' needs a table format with keys; file writes take "
                         "append, overwrite, error or ignore")
    return m


class FileDatasink:
    """Writes the blocks of one task into one file of `fmt` under `path`."""

    def __init__(self, path: str, fmt: str, filesystem: Any = None, options: dict[str, Any] | None = None,
                 try_create_dir: bool = True, column: str | None = None,
                 partition_cols: list[str] | None = None, *, mode: Any = SaveMode.APPEND,
                 filename_provider: Any = None, open_stream_args: dict[str, Any] | None = None,
                 options_fn: Callable[[], dict[str, Any]] | None = None) -> None:
        if not isinstance(path, str) or not path:
            raise ValueError(f"write path must be a non-empty string, got {path!r}")
        self.uri = path
        self.fs, self.path = resolve_filesystem(path, filesystem)
        self.fmt = fmt
        self.options = dict(options or {})
        self.options_fn = options_fn
        self.write_uuid = uuid.uuid4().hex[:16]
        self.column = column
        self.partition_cols = partition_cols
        self.mode = save_mode(mode)
        self.try_create_dir = try_create_dir
        self.open_stream_args = dict(open_stream_args or {})
        if filename_provider is not None and not callable(
                getattr(filename_provider, "get_filename_for_block", None)):
            raise TypeError("filename_provider must have a get_filename_for_block method (a "
                            f"FilenameProvider), got {type(filename_provider).__name__}")
        self.filename_provider = filename_provider
        self._skip_write = False
        self._check_options()
        if fmt == "csv" and "write_options" in self.options:  # WriteOptions does not pickle
            self.options["write_options"] = _CSVWriteOptions(self.options["write_options"])

    def _check_options(self) -> None:
        """Unknown writer options fail here, naming them, not later in a task."""
        if not self.options:
            return
        if self.fmt == "parquet":
            import pyarrow.parquet as pq

            pq.ParquetWriter(pa.BufferOutputStream(), pa.schema([]), **self.options).close()
        elif self.fmt == "csv":
            import pyarrow.csv as pcsv

            pcsv.CSVWriter(pa.BufferOutputStream(), pa.schema([]), **self.options).close()
        elif self.fmt == "json":
            import pandas as pd

            allowed = set(inspect.signature(pd.DataFrame.to_json).parameters) - {"self", "path_or_buf"}
            bad = sorted(set(self.options) - allowed)
            if bad:
                raise TypeError(f"write_json got unexpected arguments {bad} (not options of "
                                "pandas.DataFrame.to_json)")

    def get_name(self) -> str:
        return {"parquet": "Parquet", "json": "JSON", "csv": "CSV", "numpy": "Numpy"}[self.fmt]

    def on_write_start(self) -> None:
        """Applies the save mode and creates the directory (in the driver, before any task)."""
        exists = self.fs.get_file_info(self.path).type != pafs.FileType.NotFound
        if exists:
            if self.mode is SaveMode.ERROR:
                raise ValueError(f"Path {self.uri} already exists. If this is unexpected, use "
                                 "mode='ignore' to ignore those files")
            if self.mode is SaveMode.IGNORE:
                logger.warning("[SaveMode=ignore] %s exists: nothing written", self.uri)
                self._skip_write = True
                return
            if self.mode is SaveMode.OVERWRITE:
                self.fs.delete_dir_contents(self.path)
        if self.try_create_dir:
            try:
                self.fs.create_dir(self.path, recursive=True)
            except OSError as e:
                raise OSError(f"cannot create the output directory {self.uri!r}: {e}") from None

    def on_write_complete(self, result: Any) -> None:
        """Nothing to commit: every file was moved into place by its task."""

    def on_write_failed(self, error: Exception) -> None:
        """Files of tasks that finished stay (as Ray's file sinks leave them)."""

    @property
    def ext(self) -> str:
        return {"parquet": "parquet", "json": "json", "csv": "csv", "numpy": "npy"}[self.fmt]

    def _final_name(self, block: pa.Table) -> str:
        if self.filename_provider is None:
            return f"{self.write_uuid}_{uuid.uuid4().hex[:12]}_000000.{self.ext}"
        fn = self.filename_provider.get_filename_for_block
        params: Mapping[str, inspect.Parameter]
        try:
            params = inspect.signature(fn).parameters
        except (TypeError, ValueError):
            params = {}
        task_idx = self._ctx.task_idx if self._ctx is not None else 0
        if "write_uuid" in params:  # Ray's current signature
            name = fn(block, self.write_uuid, task_idx, 0)
        else:  # the older (block, task_index, block_index)
            name = fn(block, task_idx, 0)
        if not isinstance(name, str) or not name or "/" in name:
            raise ValueError(f"filename_provider returned {name!r}; it must return a file name "
                             "(a non-empty string without '/')")
        return name

    _ctx: Any = None

    def write(self, blocks: Iterator[pa.Table], ctx: Any = None) -> str:
        """Writes the task's blocks to one new file; returns its path ("" when no rows: no file).
        With a filename_provider the task's blocks become one block first (it names that)."""
        self._ctx = ctx
        it: Iterator[pa.Table] = (b for b in blocks if b.num_rows)
        first = next(it, None)
        if first is None:
            return ""
        if self.filename_provider is not None:
            first, it = B.concat([first, *it]), iter(())
        if self.partition_cols:
            return self._write_partitioned(first, it)
        return self._write_file(self.path, first, it)

    def _write_file(self, directory: str, first: pa.Table, rest: Iterator[pa.Table]) -> str:
        final = f"{directory.rstrip('/')}/{self._final_name(first)}"
        local = isinstance(self.fs, pafs.LocalFileSystem)
        target = final
        if local:
            d, name = final.rsplit("/", 1)
            target = f"{d}/.{name}.tmp"
        try:
            with self.fs.open_output_stream(target, **self.open_stream_args) as out:
                self._encode(out, first, rest)
            if local:
                self.fs.move(target, final)
        except BaseException:
            if local:
                try:
                    self.fs.delete_file(target)
                except OSError:
                    pass
            raise
        return final

    def _write_partitioned(self, first: pa.Table, rest: Iterator[pa.Table]) -> str:
        import pyarrow.compute as pc

        tbl = B.concat([first, *rest])
        cols = self.partition_cols or []
        keys = tbl.select(cols).group_by(cols).aggregate([]).to_pylist()
        last = ""
        for key in keys:
            mask = None
            for c in cols:
                m = pc.equal(tbl.column(c), pa.scalar(key[c], type=tbl.schema.field(c).type))
                mask = m if mask is None else pc.and_(mask, m)
            part = tbl.filter(mask).drop_columns(cols)
            sub = "/".join(f"{c}={key[c]}" for c in cols)
            d = f"{self.path.rstrip('/')}/{sub}"
            self.fs.create_dir(d, recursive=True)
            last = self._write_file(d, part, iter(()))
        return last

    def _encode(self, out: Any, first: pa.Table, rest: Iterator[pa.Table]) -> int:
        rows = 0
        opts = dict(self.options)
        if self.options_fn is not None:
            opts.update(self.options_fn() or {})
        if self.fmt == "parquet":
            import pyarrow.parquet as pq

            schema = first.schema
            with pq.ParquetWriter(out, schema, **opts) as w:
                for b in _chain(first, rest):
                    if b.schema != schema:
                        b = b.cast(schema)
                    w.write_table(b)
                    rows += b.num_rows
        elif self.fmt == "csv":
            import pyarrow.csv as pcsv

            if isinstance(opts.get("write_options"), _CSVWriteOptions):
                opts["write_options"] = opts["write_options"].build()
            with pcsv.CSVWriter(out, first.schema, **opts) as w:
                for b in _chain(first, rest):
                    w.write_table(b)
                    rows += b.num_rows
        elif self.fmt == "json":
            for b in _chain(first, rest):
                df = B.block_to_pandas(b)
                kw = {"orient": "records", "lines": True, "force_ascii": False, **opts}
                out.write(df.to_json(**kw).encode())
                rows += b.num_rows
        elif self.fmt == "numpy":
            tbl = B.concat(list(_chain(first, rest)))
            col = self.column or tbl.column_names[0]
            arr = B.column_to_numpy(tbl.column(col))
            import io

            buf = io.BytesIO()
            np.save(buf, arr)
            out.write(buf.getvalue())
            rows = tbl.num_rows
        else:
            raise ValueError(f"unknown output format {self.fmt!r}")
        return rows


class _CSVWriteOptions:
    """pyarrow.csv.WriteOptions as plain attributes (the pyarrow object cannot be pickled)."""

    FIELDS = ("include_header", "batch_size", "delimiter", "quoting_style", "quoting_header",
              "eol", "null_string")

    def __init__(self, wo: Any) -> None:
        self.attrs = {k: getattr(wo, k) for k in self.FIELDS if hasattr(wo, k)}

    def build(self) -> Any:
        import pyarrow.csv as pcsv

        wo = pcsv.WriteOptions()
        for k, v in self.attrs.items():
            setattr(wo, k, v)
        return wo


def _chain(first: pa.Table, rest: Iterator[pa.Table]) -> Iterator[pa.Table]:
    yield first
    yield from rest
