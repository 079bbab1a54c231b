"""DataType (Ray Data's `ray.data.datatype.DataType`): a column type backed by an Arrow type,
built with factories such as `DataType.int64()`, `DataType.string()`, `DataType.list(...)`.
Expressions use it for `cast`."""
from __future__ import annotations

import builtins
from typing import Any

import pyarrow as pa

_SIMPLE = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16",
           "float32", "float64", "string", "large_string", "bool", "binary", "large_binary",
           "null", "date32", "date64")


class DataType:
    """A column type: an Arrow type (or a Python type, which cannot be cast to)."""

    def __init__(self, internal_type: Any) -> None:
        self._physical = internal_type

    def is_arrow_type(self) -> bool:
        """Whether an Arrow type backs it."""
        return isinstance(self._physical, pa.DataType)

    def is_python_type(self) -> bool:
        """Whether a Python type backs it (DataType(int))."""
        return isinstance(self._physical, type)

    def to_arrow_dtype(self, values: list[Any] | None = None) -> pa.DataType:
        """The Arrow type (inferred from `values` for a Python-backed type)."""
        if self.is_arrow_type():
            return self._physical
        if values is not None:
            return pa.array(values).type
        raise ValueError(f"{self!r} has no Arrow type without values to infer it from")

    @classmethod
    def from_arrow(cls, arrow_type: pa.DataType) -> DataType:
        """The DataType of an Arrow type."""
        return cls(arrow_type)

    @classmethod
    def list(cls, value_type: DataType) -> DataType:
        """A variable-length list of value_type."""
        return cls(pa.list_(value_type.to_arrow_dtype()))

    @classmethod
    def struct(cls, fields: builtins.list[tuple[str, DataType]]) -> DataType:  # `list` is the method above
        """A struct of named fields."""
        return cls(pa.struct([(n, t.to_arrow_dtype()) for n, t in fields]))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, DataType) and other._physical == self._physical

    def __hash__(self) -> int:
        return hash(str(self._physical))

    def __repr__(self) -> str:
        return f"DataType(arrow:{self._physical})" if self.is_arrow_type() else \
            f"DataType(python:{getattr(self._physical, '__name__', self._physical)})"


def _factory(name: str) -> Any:
    def make(cls: type[DataType]) -> DataType:
        return cls(getattr(pa, name if name != "bool" else "bool_")())

    make.__name__ = name
    make.__doc__ = f"The Arrow {name} type."
    return classmethod(make)


for _n in _SIMPLE:
    setattr(DataType, _n, _factory(_n))
