"""Columns of n-d arrays whose shapes differ from row to row (images of several sizes).

Fixed-shape columns use Arrow's canonical fixed-shape tensor type. A column whose cells differ in
shape uses `VariableShapeTensorType`, an extension type over
`struct<data: list<T>, shape: fixed_size_list<int64>[ndim]>` (the layout of Arrow's canonical
variable-shape tensor): each cell is its flattened data and its shape. Numpy sees such a column
as an object array of n-d arrays, as Ray hands out its variable-shaped tensors.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

NAME = "ember.variable_shape_tensor"


class VariableShapeTensorType(pa.ExtensionType):  # type: ignore[misc]  # pyarrow is untyped (Any)
    """n-d arrays of one dtype and ndim, any shape per row."""

    def __init__(self, value_type: pa.DataType, ndim: int) -> None:
        self.ndim = int(ndim)
        storage = pa.struct([("data", pa.list_(value_type)),
                             ("shape", pa.list_(pa.int64(), self.ndim))])
        super().__init__(storage, NAME)

    @property
    def value_type(self) -> pa.DataType:
        return self.storage_type.field("data").type.value_type

    def __arrow_ext_serialize__(self) -> bytes:
        return str(self.ndim).encode()

    @classmethod
    def __arrow_ext_deserialize__(cls, storage_type: pa.DataType,
                                  serialized: bytes) -> VariableShapeTensorType:
        return cls(storage_type.field("data").type.value_type, int(serialized))

    def __reduce__(self) -> tuple[Any, ...]:
        return VariableShapeTensorType, (self.value_type, self.ndim)


try:  # so parquet and IPC keep the type
    pa.register_extension_type(VariableShapeTensorType(pa.uint8(), 1))
except pa.ArrowKeyError:  # pragma: no cover - registered by an earlier import
    pass


def is_var_tensor(t: pa.DataType) -> bool:
    return isinstance(t, VariableShapeTensorType)


def from_arrays(items: list[Any]) -> pa.ExtensionArray:
    """A variable-shape tensor column of n-d arrays (None cells are null)."""
    arrs = [None if v is None else np.asarray(v) for v in items]
    present = [a for a in arrs if a is not None]
    if not present:
        raise ValueError("a tensor column needs at least one array")
    ndims = {a.ndim for a in present}
    if len(ndims) != 1:
        raise ValueError(f"a tensor column's arrays must have one number of dimensions, got "
                         f"{sorted(ndims)}")
    dtype = np.result_type(*present)
    value_type = pa.from_numpy_dtype(dtype)
    ndim = ndims.pop()
    data = pa.array([None if a is None else a.astype(dtype, copy=False).ravel() for a in arrs],
                    type=pa.list_(value_type))
    shape = pa.array([None if a is None else list(a.shape) for a in arrs],
                     type=pa.list_(pa.int64(), ndim))
    mask = pa.array([a is None for a in arrs])
    storage = pa.StructArray.from_arrays([data, shape], names=["data", "shape"], mask=mask)
    return pa.ExtensionArray.from_storage(VariableShapeTensorType(value_type, ndim), storage)


def to_numpy(col: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """An object array of the column's n-d arrays (None for null cells)."""
    chunks = col.chunks if isinstance(col, pa.ChunkedArray) else [col]
    out: list[Any] = []
    for ch in chunks:
        storage = ch.storage
        data, shape = storage.field("data"), storage.field("shape")
        for i in range(len(ch)):
            if not storage[i].is_valid:
                out.append(None)
                continue
            flat = data[i].values.to_numpy(zero_copy_only=False)
            out.append(flat.reshape(shape[i].as_py()))
    arr = np.empty(len(out), dtype=object)
    arr[:] = out
    return arr


def unify_tensor_columns(blocks: list[pa.Table]) -> list[pa.Table]:
    """The blocks with every column that is a tensor of different shapes across blocks (or
    already variable-shape in one) turned into a variable-shape tensor column, so they concat."""
    names = {n for b in blocks for n in b.column_names}
    out = list(blocks)
    for name in names:
        types = [b.schema.field(name).type for b in out if name in b.column_names]
        tensorish = [t for t in types if isinstance(t, pa.FixedShapeTensorType) or is_var_tensor(t)]
        if len(tensorish) != len(types) or len({str(t) for t in types}) <= 1:
            continue
        for k, b in enumerate(out):
            if name not in b.column_names or is_var_tensor(b.schema.field(name).type):
                continue
            from ember.data.block import column_to_numpy

            arr = column_to_numpy(b.column(name))
            col = from_arrays(list(arr))
            out[k] = b.set_column(b.column_names.index(name), name, col)
    return out
