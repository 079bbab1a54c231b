"""Blocks: every block is a `pyarrow.Table`; helpers convert batches and rows to and from it.

A UDF sees a batch as a dict of numpy arrays ("numpy"/"default"), a pandas DataFrame ("pandas") or
the Arrow table itself ("pyarrow"); it may return any of those (or a list of row dicts). Numeric
columns without nulls become numpy arrays without a copy; n-d numpy columns are stored as Arrow's
canonical fixed-shape tensor extension type and come back as n-d arrays.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Iterable, Iterator, TypeAlias

import numpy as np
import pyarrow as pa

from ._internal import var_tensor as VT

# pyarrow is untyped (mypy sees its objects as Any), so this alias only names the type.
Block: TypeAlias = pa.Table
VALID_BATCH_FORMATS = ("default", "numpy", "pandas", "pyarrow", None)


@dataclasses.dataclass
class BlockExecStats:
    """What producing one block cost, measured in the worker."""

    wall_time_s: float = 0.0
    cpu_time_s: float = 0.0
    max_heap_bytes: int = 0
    udf_time_s: float = 0.0


@dataclasses.dataclass
class BlockMetadata:
    """What the driver knows of a block without fetching it."""

    num_rows: int
    size_bytes: int
    schema: pa.Schema | None = None
    input_files: list[str] = dataclasses.field(default_factory=list)
    exec_stats: BlockExecStats | None = None


def column_to_arrow(values: Any) -> pa.Array | pa.ChunkedArray:
    """One column (numpy array, list, pandas Series, Arrow array) as an Arrow array."""
    if isinstance(values, (pa.Array, pa.ChunkedArray)):
        return values
    if isinstance(values, np.ndarray):
        if values.ndim > 1:
            if values.dtype == object:
                return pa.array(list(values))
            arr = np.ascontiguousarray(values)
            return pa.FixedShapeTensorArray.from_numpy_ndarray(arr)
        if values.dtype == object:
            items = list(values)
            if items and all(isinstance(v, np.ndarray) for v in items):
                shapes = {v.shape for v in items}
                if len(shapes) == 1 and items[0].ndim >= 1:
                    return column_to_arrow(np.stack(items))
                if len({v.ndim for v in items}) == 1 and items[0].ndim >= 2:
                    return VT.from_arrays(items)
            return pa.array(items)
        return pa.array(values)
    try:
        import pandas as pd

        if isinstance(values, pd.Series):
            return column_to_arrow(values.to_numpy())
    except ImportError:  # pragma: no cover - pandas is in the data extra
        pass
    if isinstance(values, list) and values and all(isinstance(v, np.ndarray) for v in values):
        return column_to_arrow(np.array(values) if len({v.shape for v in values}) == 1
                               else np.array(values, dtype=object))
    return pa.array(values)


def to_block(batch: Any) -> Block:
    """A UDF's output (table, dict of columns, DataFrame, list of rows) as an Arrow table."""
    if isinstance(batch, pa.Table):
        return batch
    if isinstance(batch, dict):
        cols = {str(k): column_to_arrow(v) for k, v in batch.items()}
        lengths = {len(c) for c in cols.values()}
        if len(lengths) > 1:
            raise ValueError(f"the batch's columns have different lengths: "
                             f"{ {k: len(c) for k, c in cols.items()} }")
        return pa.table(cols)
    if isinstance(batch, list):
        return rows_to_block(batch)
    mod = type(batch).__module__
    if mod.startswith("pandas"):
        return pandas_to_block(batch)
    raise ValueError(f"a batch must be a pyarrow.Table, a pandas.DataFrame or a dict of "
                     f"numpy arrays; got {type(batch).__name__}")


def pandas_to_block(df: Any) -> Block:
    """A DataFrame as a table (tensor columns of ndarrays become fixed-shape tensors; NaN in a
    float or string column becomes null, as pandas means it and as Arrow's from_pandas does;
    categoricals become dictionary columns)."""
    import pandas as pd

    cols = {}
    for name in df.columns:
        if str(df[name].dtype) == "category" or isinstance(df[name].dtype, pd.StringDtype):
            cols[str(name)] = pa.array(df[name], from_pandas=True)  # dictionaries; NaN = null
            continue
        values = df[name].to_numpy()
        if values.ndim == 1 and values.dtype.kind == "f":  # pandas' NaN means missing: a null
            cols[str(name)] = pa.array(values, from_pandas=True)
            continue
        cols[str(name)] = column_to_arrow(values)
    if not cols:
        return pa.table({})
    return pa.table(cols)


def rows_to_block(rows: list[Any]) -> Block:
    """A list of row dicts (or scalars, stored in column "item") as a table."""
    if not rows:
        return pa.table({})
    if not isinstance(rows[0], dict):
        return pa.table({"item": column_to_arrow(_as_column(rows))})
    names: dict[str, None] = {}
    for r in rows:
        if not isinstance(r, dict):
            raise ValueError(f"rows must all be dicts, got {type(r).__name__}")
        for k in r:
            names[k] = None
    return pa.table({k: column_to_arrow(_as_column([r.get(k) for r in rows])) for k in names})


def _as_column(values: list[Any]) -> Any:
    if values and all(isinstance(v, np.ndarray) for v in values):
        if len({v.shape for v in values}) == 1:
            return np.stack(values)
        out = np.empty(len(values), dtype=object)
        out[:] = values
        return out
    return values


def column_to_numpy(col: pa.ChunkedArray | pa.Array, zero_copy: bool = True) -> np.ndarray:
    """An Arrow column as numpy: zero-copy for numeric columns without nulls."""
    if VT.is_var_tensor(col.type):
        return VT.to_numpy(col)
    if isinstance(col, pa.ChunkedArray):
        if isinstance(col.type, pa.FixedShapeTensorType):
            if col.num_chunks == 1:
                first: np.ndarray = col.chunk(0).to_numpy_ndarray()
                return first
            return np.concatenate([c.to_numpy_ndarray() for c in col.chunks]) if col.num_chunks \
                else np.empty((0, *col.type.shape))
        if col.num_chunks == 1:
            return column_to_numpy(col.chunk(0), zero_copy)
        col = col.combine_chunks() if col.num_chunks else pa.array([], type=col.type)
    if isinstance(col.type, pa.FixedShapeTensorType):
        tensor: np.ndarray = col.to_numpy_ndarray()
        return tensor
    if pa.types.is_list(col.type) or pa.types.is_large_list(col.type) or \
            pa.types.is_fixed_size_list(col.type):
        items = col.to_pylist()
        try:
            return np.array([np.asarray(v) for v in items]) if items else np.empty(0, dtype=object)
        except ValueError:
            out = np.empty(len(items), dtype=object)
            out[:] = [np.asarray(v) for v in items]
            return out
    flat: np.ndarray
    try:
        flat = col.to_numpy(zero_copy_only=True)
    except (pa.ArrowInvalid, NotImplementedError):
        flat = col.to_numpy(zero_copy_only=False)
    return flat


def block_to_batch(block: Block, batch_format: str | None, zero_copy: bool = True) -> Any:
    """A table in the form a UDF asked for."""
    if batch_format in ("default", "numpy"):
        return {name: column_to_numpy(block.column(name), zero_copy) for name in block.column_names}
    if batch_format == "pandas":
        return block_to_pandas(block)
    if batch_format in ("pyarrow", None):
        return block
    raise ValueError(f"batch_format must be one of {VALID_BATCH_FORMATS[:-1]}, got {batch_format!r}")


def block_to_pandas(block: Block) -> Any:
    """A table as a DataFrame (tensor columns become columns of ndarrays)."""
    import pandas as pd

    if not any(isinstance(f.type, pa.FixedShapeTensorType) or pa.types.is_list(f.type)
               or VT.is_var_tensor(f.type) for f in block.schema):
        return block.to_pandas()
    data = {}
    for name in block.column_names:
        arr = column_to_numpy(block.column(name))
        data[name] = list(arr) if arr.ndim > 1 else arr
    return pd.DataFrame(data)


def iter_rows(block: Block) -> Iterator[dict[str, Any]]:
    """Rows of a table as dicts (tensor cells as numpy arrays)."""
    n = block.num_rows
    if n == 0:
        return
    special = [name for name, f in zip(block.column_names, block.schema, strict=False)
               if isinstance(f.type, pa.FixedShapeTensorType) or VT.is_var_tensor(f.type)]
    if not special:
        yield from block.to_pylist()
        return
    cols = {name: (column_to_numpy(block.column(name)) if name in special
                   else block.column(name).to_pylist()) for name in block.column_names}
    for i in range(n):
        yield {name: cols[name][i] for name in cols}


def concat(blocks: Iterable[Block]) -> Block:
    """Concatenates tables, unifying schemas (missing columns become nulls)."""
    blocks = [b for b in blocks if b is not None]
    if not blocks:
        return pa.table({})
    nonempty = [b for b in blocks if b.num_columns > 0]
    if not nonempty:
        return blocks[0]
    if len(nonempty) == 1:
        return nonempty[0]
    nonempty = VT.unify_tensor_columns(nonempty)
    try:
        return pa.concat_tables(nonempty, promote_options="default")
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return pa.concat_tables(nonempty, promote_options="permissive")


def compact(block: Block) -> Block:
    """The table with buffers of its own size: one chunk per column, slices copied out of their
    parents. Pickling a slice stores its parent's whole buffers, so a block cut from a larger
    table (a batch, a limit, a split) is compacted before it goes into the object store."""
    if block.num_rows == 0:
        return block.schema.empty_table()
    if any(c.num_chunks > 1 for c in block.columns):
        block = block.combine_chunks()
    cols = []
    changed = False
    for col in block.columns:
        chunk = col.chunk(0) if col.num_chunks else None
        if chunk is not None and _oversized(chunk):
            try:
                chunk = pa.concat_arrays([chunk])
                changed = True
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, TypeError):
                pass
        cols.append(chunk if chunk is not None else col)
    return pa.Table.from_arrays(cols, schema=block.schema) if changed else block


def _oversized(arr: pa.Array) -> bool:
    try:
        need: int = arr.nbytes
        total: int = arr.get_total_buffer_size()
        return total > need + max(4096, need // 8)
    except Exception:  # pragma: no cover - exotic extension types
        return False


def size_bytes(block: Block) -> int:
    """Bytes a table's buffers take (slices count their share)."""
    try:
        return int(block.nbytes)
    except Exception:  # pragma: no cover - exotic extension types
        return int(block.get_total_buffer_size())


def metadata_of(block: Block, input_files: list[str] | None = None,
                stats: BlockExecStats | None = None) -> BlockMetadata:
    """The metadata the driver keeps of block."""
    return BlockMetadata(num_rows=block.num_rows, size_bytes=size_bytes(block), schema=block.schema,
                         input_files=list(input_files or []), exec_stats=stats)
