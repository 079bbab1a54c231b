"""Datasinks: one file per write task, written atomically, named so reruns never collide.

File names are `{write_uuid}_{task_uuid}_000000.{ext}`: a fresh uuid per `write_*` call and per
task. On a local filesystem a file is written under a hidden temporary name and renamed into
place when complete; on object stores (S3) the upload only becomes visible when it completes.
"""
from __future__ import annotations

import uuid
from typing import Any, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs

from ember.data import block as B

from .paths import resolve_filesystem


class FileDatasink:
    """Writes the blocks of one task into one file of `fmt` under `path`."""

    def __init__(self, path: str, fmt: str, filesystem: Any = None, options: dict | None = None,
                 try_create_dir: bool = True, column: str | None = None,
                 partition_cols: list[str] | None = None) -> None:
        if not isinstance(path, str) or not path:
            raise ValueError(f"write path must be a non-empty string, got {path!r}")
        self.uri = path
        self.fs, self.path = resolve_filesystem(path, filesystem)
        self.fmt = fmt
        self.options = dict(options or {})
        self.write_uuid = uuid.uuid4().hex[:16]
        self.column = column
        self.partition_cols = partition_cols
        if try_create_dir:
            try:
                self.fs.create_dir(self.path, recursive=True)
            except OSError as e:
                raise OSError(f"cannot create the output directory {path!r}: {e}") from None

    @property
    def ext(self) -> str:
        return {"parquet": "parquet", "json": "json", "csv": "csv", "numpy": "npy"}[self.fmt]

    def _final_name(self) -> str:
        return f"{self.write_uuid}_{uuid.uuid4().hex[:12]}_000000.{self.ext}"

    def write(self, blocks: Iterator[pa.Table]) -> tuple[str, int, int]:
        """Writes blocks to one new file; returns (path, rows, bytes). No rows, no file."""
        it = (b for b in blocks if b.num_rows)
        first = next(it, None)
        if first is None:
            return "", 0, 0
        if self.partition_cols:
            return self._write_partitioned(first, it)
        return self._write_file(self.path, first, it)

    def _write_file(self, directory: str, first: pa.Table, rest: Iterator[pa.Table]) -> tuple[str, int, int]:
        final = f"{directory.rstrip('/')}/{self._final_name()}"
        local = isinstance(self.fs, pafs.LocalFileSystem)
        target = final
        if local:
            d, name = final.rsplit("/", 1)
            target = f"{d}/.{name}.tmp"
        rows = 0
        try:
            with self.fs.open_output_stream(target) as out:
                rows = self._encode(out, first, rest)
            if local:
                self.fs.move(target, final)
        except BaseException:
            if local:
                try:
                    self.fs.delete_file(target)
                except OSError:
                    pass
            raise
        size = self.fs.get_file_info(final).size or 0
        return final, rows, size

    def _write_partitioned(self, first: pa.Table, rest: Iterator[pa.Table]) -> tuple[str, int, int]:
        import pyarrow.compute as pc

        tbl = B.concat([first, *rest])
        cols = self.partition_cols or []
        keys = tbl.select(cols).group_by(cols).aggregate([]).to_pylist()
        total_rows, total_bytes, last = 0, 0, ""
        for key in keys:
            mask = None
            for c in cols:
                m = pc.equal(tbl.column(c), pa.scalar(key[c], type=tbl.schema.field(c).type))
                mask = m if mask is None else pc.and_(mask, m)
            part = tbl.filter(mask).drop_columns(cols)
            sub = "/".join(f"{c}={key[c]}" for c in cols)
            d = f"{self.path.rstrip('/')}/{sub}"
            self.fs.create_dir(d, recursive=True)
            last, r, b = self._write_file(d, part, iter(()))
            total_rows += r
            total_bytes += b
        return last, total_rows, total_bytes

    def _encode(self, out: Any, first: pa.Table, rest: Iterator[pa.Table]) -> int:
        rows = 0
        if self.fmt == "parquet":
            import pyarrow.parquet as pq

            schema = first.schema
            with pq.ParquetWriter(out, schema, **self.options) as w:
                for b in _chain(first, rest):
                    if b.schema != schema:
                        b = b.cast(schema)
                    w.write_table(b)
                    rows += b.num_rows
        elif self.fmt == "csv":
            import pyarrow.csv as pcsv

            with pcsv.CSVWriter(out, first.schema) as w:
                for b in _chain(first, rest):
                    w.write_table(b)
                    rows += b.num_rows
        elif self.fmt == "json":
            for b in _chain(first, rest):
                df = B.block_to_pandas(b)
                out.write(df.to_json(orient="records", lines=True, force_ascii=False).encode())
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


def _chain(first: pa.Table, rest: Iterator[pa.Table]) -> Iterator[pa.Table]:
    yield first
    yield from rest
