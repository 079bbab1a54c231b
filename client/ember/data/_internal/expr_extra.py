"""Expressions that are not element-wise Arrow kernels: uuid() (a random UUID4 string per row),
download(uri_column) (the bytes behind each URI, read with pyarrow.fs) and unnest(expr) (a
struct expression spread into one column per field by Dataset.with_columns)."""
from __future__ import annotations

import uuid as _uuid
from typing import Any

import pyarrow as pa

from ember.data.expressions import Expr


class UUIDExpr(Expr):
    """A fresh UUID4 string per row."""

    def eval(self, block: pa.Table) -> Any:
        return pa.array([str(_uuid.uuid4()) for _ in range(block.num_rows)], pa.string())

    def __repr__(self) -> str:
        return "uuid()"


class DownloadExpr(Expr):
    """The bytes of the file each URI of a column names (local paths or any pyarrow.fs URI);
    a null URI gives a null."""

    def __init__(self, uri_column_name: str, filesystem: Any = None) -> None:
        self.uri_column_name = uri_column_name
        self.filesystem = filesystem

    def _read(self, uri: str) -> bytes:
        from pyarrow import fs as pafs

        try:
            if self.filesystem is not None:
                fs, path = self.filesystem, uri
            else:
                fs, path = pafs.FileSystem.from_uri(uri if "://" in uri else
                                                    "file://" + _abs(uri))
            with fs.open_input_stream(path) as f:
                data: bytes = f.read()
                return data
        except (OSError, pa.ArrowInvalid) as e:
            raise OSError(f"download(): cannot read {uri!r}: {e}") from None

    def eval(self, block: pa.Table) -> Any:
        if self.uri_column_name not in block.column_names:
            raise KeyError(f"download(): no column {self.uri_column_name!r} in the block; the "
                           f"columns are {block.column_names}")
        uris = block.column(self.uri_column_name).to_pylist()
        return pa.array([None if u is None else self._read(u) for u in uris], pa.binary())

    def __repr__(self) -> str:
        return f"download({self.uri_column_name!r})"


def _abs(path: str) -> str:
    import os

    return os.path.abspath(path)


class UnnestExpr(Expr):
    """A struct expression to spread into its fields (only as a positional argument of
    Dataset.with_columns)."""

    def __init__(self, expr: Expr) -> None:
        if isinstance(expr, UnnestExpr):
            raise TypeError("unnest() cannot be nested inside another unnest().")
        if not isinstance(expr, Expr):
            raise TypeError(f"unnest() expects an expression, got {type(expr).__name__}.")
        self.expr = expr

    def eval(self, block: pa.Table) -> Any:
        raise TypeError("unnest() gives several columns: pass it to with_columns() "
                        "positionally, not as one column's value")

    def columns(self, block: pa.Table) -> dict[str, Any]:
        """{field name: values} of the struct expression on a block."""
        values = self.expr.eval(block)
        if not pa.types.is_struct(values.type):
            raise TypeError(f"unnest() needs a struct-typed expression, {self.expr!r} is "
                            f"{values.type}")
        if isinstance(values, pa.ChunkedArray):
            values = values.combine_chunks()
        return {values.type.field(i).name: values.field(i) for i in range(values.type.num_fields)}

    def __repr__(self) -> str:
        return f"unnest({self.expr!r})"
