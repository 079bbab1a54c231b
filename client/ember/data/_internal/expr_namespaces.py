"""The `.str` and `.list` namespaces of expressions: Ray's method names, each an Arrow kernel
applied to the expression's values."""
from __future__ import annotations

import builtins
from typing import Any, Callable

import pyarrow as pa
import pyarrow.compute as pc

from ember.data.expressions import Expr, UDFExpr

# method -> Arrow kernel taking (values, *args, **kwargs)
_STR: dict[str, Callable[..., Any]] = {
    "len": pc.utf8_length, "byte_len": pc.binary_length, "upper": pc.utf8_upper,
    "lower": pc.utf8_lower, "capitalize": pc.utf8_capitalize, "title": pc.utf8_title,
    "swapcase": pc.utf8_swapcase, "is_alpha": pc.utf8_is_alpha, "is_alnum": pc.utf8_is_alnum,
    "is_digit": pc.utf8_is_digit, "is_decimal": pc.utf8_is_decimal,
    "is_numeric": pc.utf8_is_numeric, "is_space": pc.utf8_is_space,
    "is_lower": pc.utf8_is_lower, "is_upper": pc.utf8_is_upper, "is_title": pc.utf8_is_title,
    "is_printable": pc.utf8_is_printable, "is_ascii": pc.string_is_ascii,
    "starts_with": pc.starts_with, "ends_with": pc.ends_with, "contains": pc.match_substring,
    "match": pc.match_like, "find": pc.find_substring, "count": pc.count_substring,
    "find_regex": pc.find_substring_regex, "count_regex": pc.count_substring_regex,
    "match_regex": pc.match_substring_regex, "reverse": pc.utf8_reverse,
    "slice": pc.utf8_slice_codeunits, "replace": pc.replace_substring,
    "replace_regex": pc.replace_substring_regex, "replace_slice": pc.utf8_replace_slice,
    "split": pc.split_pattern, "split_regex": pc.split_pattern_regex,
    "split_whitespace": pc.utf8_split_whitespace, "extract": pc.extract_regex,
    "repeat": pc.binary_repeat, "center": pc.utf8_center, "lpad": pc.utf8_lpad,
    "rpad": pc.utf8_rpad,
}


class StringNamespace:
    """`expr.str.<method>(...)`: upper, lower, len, contains, starts_with, replace, split, strip,
    pad... (the Arrow utf8 kernels)."""

    def __init__(self, expr: Expr) -> None:
        self._expr = expr

    def __getattr__(self, method: str) -> Callable[..., UDFExpr]:
        kernel = _STR.get(method)
        if kernel is None:
            raise AttributeError(f"expressions have no .str.{method}()")

        def call(*args: Any, **kwargs: Any) -> UDFExpr:
            return UDFExpr(f"str.{method}", kernel, [self._expr], args, kwargs)

        return call

    def _trim(self, side: str, characters: str | None) -> UDFExpr:
        if characters is None:
            return UDFExpr(f"str.{side}strip", getattr(pc, f"utf8_{side}trim_whitespace"),
                           [self._expr], (), {})
        return UDFExpr(f"str.{side}strip", getattr(pc, f"utf8_{side}trim"), [self._expr], (),
                       {"characters": characters})

    def strip(self, characters: str | None = None) -> UDFExpr:
        """Removes whitespace (or `characters`) at both ends."""
        return self._trim("", characters)

    def lstrip(self, characters: str | None = None) -> UDFExpr:
        """Removes whitespace (or `characters`) at the start."""
        return self._trim("l", characters)

    def rstrip(self, characters: str | None = None) -> UDFExpr:
        """Removes whitespace (or `characters`) at the end."""
        return self._trim("r", characters)

    def pad(self, width: int, fillchar: str = " ", side: str = "right") -> UDFExpr:
        """Pads to `width` on the right, left or both sides."""
        kernels = {"right": pc.utf8_rpad, "left": pc.utf8_lpad, "both": pc.utf8_center}
        if side not in kernels:
            raise ValueError(f"side must be 'left', 'right' or 'both', got {side!r}")
        return UDFExpr("str.pad", kernels[side], [self._expr], (),
                       {"width": width, "padding": fillchar})


def _list_sort(arr: Any, order: str, null_placement: str) -> pa.Array:
    rows = arr.to_pylist()
    out: list[list[Any] | None] = []
    for r in rows:
        if r is None:
            out.append(None)
            continue
        vals = sorted((v for v in r if v is not None), reverse=order == "descending")
        nulls = [None] * (len(r) - len(vals))
        out.append(nulls + vals if null_placement == "at_start" else vals + nulls)
    return pa.array(out, type=arr.type)


def _list_flatten(arr: Any) -> pa.Array:
    rows = arr.to_pylist()
    flat = [None if r is None else [v for inner in r if inner is not None for v in inner]
            for r in rows]
    return pa.array(flat, type=arr.type.value_type)


class ListNamespace:
    """`expr.list.<method>(...)`: len, get / [i], slice / [a:b], sort, flatten."""

    def __init__(self, expr: Expr) -> None:
        self._expr = expr

    def len(self) -> UDFExpr:
        """Number of elements of each list."""
        return UDFExpr("list.len", pc.list_value_length, [self._expr], (), {})

    def get(self, index: int) -> UDFExpr:
        """The element at `index` of each list."""
        return UDFExpr("list.get", pc.list_element, [self._expr], (index,), {})

    def slice(self, start: int | None = None, stop: int | None = None,
              step: int | None = None) -> UDFExpr:
        """A slice of each list."""
        return UDFExpr("list.slice", pc.list_slice, [self._expr], (),
                       {"start": start or 0, "stop": stop, "step": step or 1})

    def __getitem__(self, key: int | builtins.slice) -> UDFExpr:  # `slice` is the method above
        if isinstance(key, int):
            return self.get(key)
        if isinstance(key, slice):
            return self.slice(key.start, key.stop, key.step)
        raise TypeError(f"list indices must be integers or slices, not {type(key).__name__}")

    def sort(self, order: str = "ascending", null_placement: str = "at_end") -> UDFExpr:
        """Each list sorted."""
        if order not in ("ascending", "descending"):
            raise ValueError(f"order must be 'ascending' or 'descending', got {order!r}")
        if null_placement not in ("at_start", "at_end"):
            raise ValueError(f"null_placement must be 'at_start' or 'at_end', got {null_placement!r}")
        return UDFExpr("list.sort", _list_sort, [self._expr], (order, null_placement), {})

    def flatten(self) -> UDFExpr:
        """Each list of lists made one list."""
        return UDFExpr("list.flatten", _list_flatten, [self._expr], (), {})


class DatetimeNamespace:
    """`expr.dt.<method>()`: year, month, day, hour, minute, second, strftime(fmt), and
    ceil/floor/round(unit) of timestamps."""

    def __init__(self, expr: Expr) -> None:
        self._expr = expr

    def _part(self, name: str) -> UDFExpr:
        return UDFExpr(f"dt.{name}", getattr(pc, name), [self._expr], (), {})

    def year(self) -> UDFExpr:
        """The year."""
        return self._part("year")

    def month(self) -> UDFExpr:
        """The month (1-12)."""
        return self._part("month")

    def day(self) -> UDFExpr:
        """The day of the month."""
        return self._part("day")

    def hour(self) -> UDFExpr:
        """The hour."""
        return self._part("hour")

    def minute(self) -> UDFExpr:
        """The minute."""
        return self._part("minute")

    def second(self) -> UDFExpr:
        """The second."""
        return self._part("second")

    def strftime(self, fmt: str) -> UDFExpr:
        """The timestamps formatted with a strftime pattern."""
        return UDFExpr("dt.strftime", pc.strftime, [self._expr], (), {"format": fmt})

    def _round(self, how: str, unit: str) -> UDFExpr:
        return UDFExpr(f"dt.{how}", getattr(pc, f"{how}_temporal"), [self._expr], (),
                       {"multiple": 1, "unit": unit})

    def ceil(self, unit: str) -> UDFExpr:
        """Up to the next multiple of `unit` ("day", "hour"...)."""
        return self._round("ceil", unit)

    def floor(self, unit: str) -> UDFExpr:
        """Down to the previous multiple of `unit`."""
        return self._round("floor", unit)

    def round(self, unit: str) -> UDFExpr:
        """To the nearest multiple of `unit`."""
        return self._round("round", unit)


class StructNamespace:
    """`expr.struct.field(name)` / `["name"]` / `field_by_index(i)`: one field of a struct."""

    def __init__(self, expr: Expr) -> None:
        self._expr = expr

    def field(self, field_name: str) -> UDFExpr:
        """The field named field_name."""
        return UDFExpr("struct.field", pc.struct_field, [self._expr], (),
                       {"indices": [field_name]})

    def field_by_index(self, index: int) -> UDFExpr:
        """The field at position index."""
        return UDFExpr("struct.field", pc.struct_field, [self._expr], (), {"indices": [index]})

    def __getitem__(self, key: str | int) -> UDFExpr:
        return self.field(key) if isinstance(key, str) else self.field_by_index(key)
