"""Column expressions (Ray Data's `ray.data.expressions`): `col`, `lit`, arithmetic, comparison,
boolean operators, null tests, `is_in`, math methods, `cast`, and the `.str` / `.list`
/ `.dt` / `.struct` namespaces and `udf`, evaluated with pyarrow.compute on whole Arrow
blocks.

    from ember.data.expressions import col, lit
    ds.with_column("total", col("price") * col("qty") + lit(1))
    ds.filter(expr=(col("score") > 0.8) & col("lang").is_in(["zh", "en"]))

An `Expr` is an immutable tree; `eval(table)` computes it on one block. Trees made only of
columns, literals and operators convert to a `pyarrow.compute.Expression` (`to_pyarrow()`), so a
filter on them is pushed into parquet reads. Operators follow Ray's Arrow mapping: `/` is Arrow's
divide (integer division for two integer columns), `//` floors, `%` is N - floor(N/M) * M,
`&`/`|` use Kleene logic, `+` on strings concatenates.
"""
from __future__ import annotations

import enum
from typing import Any, Callable

import pyarrow as pa
import pyarrow.compute as pc

from .datatype import DataType

__all__ = ["AliasExpr", "BinaryExpr", "ColumnExpr", "DataType", "Expr", "LiteralExpr",
           "Operation", "UDFExpr", "UnaryExpr", "col", "download", "lit", "pyarrow_udf",
           "to_arrow_expression", "udf", "unnest", "uuid"]


class Operation(str, enum.Enum):
    """The operators of an expression tree (Ray's names)."""

    ADD = "add"
    SUB = "sub"
    MUL = "mul"
    DIV = "div"
    MOD = "mod"
    FLOORDIV = "floordiv"
    GT = "gt"
    LT = "lt"
    GE = "ge"
    LE = "le"
    EQ = "eq"
    NE = "ne"
    AND = "and"
    OR = "or"
    NOT = "not"
    IS_NULL = "is_null"
    IS_NOT_NULL = "is_not_null"
    IN = "in"
    NOT_IN = "not_in"


def _is_str(x: Any) -> bool:
    t = getattr(x, "type", None)
    if isinstance(x, str):
        return True
    return t is not None and (pa.types.is_string(t) or pa.types.is_large_string(t))


def _add(a: Any, b: Any) -> Any:
    if _is_str(a) or _is_str(b):
        large = any(pa.types.is_large_string(getattr(x, "type", pa.string())) for x in (a, b))
        t = pa.large_string() if large else pa.string()
        a, b = (pa.scalar(x, t) if isinstance(x, str) else x.cast(t) for x in (a, b))
        return pc.binary_join_element_wise(a, b, pa.scalar("", t))
    return pc.add(a, b)


def _mod(a: Any, b: Any) -> Any:
    return pc.subtract(a, pc.multiply(pc.floor(pc.divide(a, b)), b))


_BINARY: dict[Operation, Callable[[Any, Any], Any]] = {
    Operation.ADD: _add, Operation.SUB: pc.subtract, Operation.MUL: pc.multiply,
    Operation.DIV: pc.divide, Operation.MOD: _mod,
    Operation.FLOORDIV: lambda a, b: pc.floor(pc.divide(a, b)),
    Operation.GT: pc.greater, Operation.LT: pc.less, Operation.GE: pc.greater_equal,
    Operation.LE: pc.less_equal, Operation.EQ: pc.equal, Operation.NE: pc.not_equal,
    Operation.AND: pc.and_kleene, Operation.OR: pc.or_kleene,
}
_UNARY: dict[Operation, Callable[[Any], Any]] = {
    Operation.NOT: pc.invert, Operation.IS_NULL: pc.is_null, Operation.IS_NOT_NULL: pc.is_valid,
}


def _wrap(x: Any) -> Expr:
    return x if isinstance(x, Expr) else LiteralExpr(x)


class Expr:
    """A node of an expression tree; operators build bigger trees."""

    def eval(self, block: pa.Table) -> Any:  # pragma: no cover - every node defines it
        """The values of this expression on one block (an Arrow array or scalar)."""
        raise NotImplementedError

    def to_pyarrow(self) -> pc.Expression:
        """The equivalent pyarrow.compute.Expression (ValueError when a node has none)."""
        raise ValueError(f"{self!r} has no pyarrow.compute.Expression equivalent")

    @property
    def name(self) -> str | None:
        """The output name (a column's, or an alias); None otherwise."""
        return None

    def alias(self, name: str) -> AliasExpr:
        """The same values under another name."""
        return AliasExpr(self, name)

    def structurally_equals(self, other: Any) -> bool:
        """Whether two trees are the same (== builds a comparison instead)."""
        return repr(self) == repr(other) and type(self) is type(other)

    __hash__ = object.__hash__

    def _bin(self, other: Any, op: Operation, reverse: bool = False) -> BinaryExpr:
        o = _wrap(other)
        return BinaryExpr(op, o, self) if reverse else BinaryExpr(op, self, o)

    def __add__(self, o: Any) -> BinaryExpr: return self._bin(o, Operation.ADD)  # noqa: E704
    def __radd__(self, o: Any) -> BinaryExpr: return self._bin(o, Operation.ADD, True)  # noqa: E704
    def __sub__(self, o: Any) -> BinaryExpr: return self._bin(o, Operation.SUB)  # noqa: E704
    def __rsub__(self, o: Any) -> BinaryExpr: return self._bin(o, Operation.SUB, True)  # noqa: E704
    def __mul__(self, o: Any) -> BinaryExpr: return self._bin(o, Operation.MUL)  # noqa: E704
    def __rmul__(self, o: Any) -> BinaryExpr: return self._bin(o, Operation.MUL, True)  # noqa: E704
    def __truediv__(self, o: Any) -> BinaryExpr: return self._bin(o, Operation.DIV)  # noqa: E704
    def __rtruediv__(self, o: Any) -> BinaryExpr: return self._bin(o, Operation.DIV, True)  # noqa: E704
    def __floordiv__(self, o: Any) -> BinaryExpr: return self._bin(o, Operation.FLOORDIV)  # noqa: E704
    def __rfloordiv__(self, o: Any) -> BinaryExpr: return self._bin(o, Operation.FLOORDIV, True)  # noqa: E704
    def __mod__(self, o: Any) -> BinaryExpr: return self._bin(o, Operation.MOD)  # noqa: E704
    def __rmod__(self, o: Any) -> BinaryExpr: return self._bin(o, Operation.MOD, True)  # noqa: E704
    def __gt__(self, o: Any) -> BinaryExpr: return self._bin(o, Operation.GT)  # noqa: E704
    def __lt__(self, o: Any) -> BinaryExpr: return self._bin(o, Operation.LT)  # noqa: E704
    def __ge__(self, o: Any) -> BinaryExpr: return self._bin(o, Operation.GE)  # noqa: E704
    def __le__(self, o: Any) -> BinaryExpr: return self._bin(o, Operation.LE)  # noqa: E704
    def __eq__(self, o: Any) -> BinaryExpr: return self._bin(o, Operation.EQ)  # type: ignore[override]  # noqa: E704
    def __ne__(self, o: Any) -> BinaryExpr: return self._bin(o, Operation.NE)  # type: ignore[override]  # noqa: E704
    def __and__(self, o: Any) -> BinaryExpr: return self._bin(o, Operation.AND)  # noqa: E704
    def __rand__(self, o: Any) -> BinaryExpr: return self._bin(o, Operation.AND, True)  # noqa: E704
    def __or__(self, o: Any) -> BinaryExpr: return self._bin(o, Operation.OR)  # noqa: E704
    def __ror__(self, o: Any) -> BinaryExpr: return self._bin(o, Operation.OR, True)  # noqa: E704
    def __invert__(self) -> UnaryExpr: return UnaryExpr(Operation.NOT, self)  # noqa: E704

    def __bool__(self) -> bool:
        raise TypeError("an expression has no truth value: combine conditions with & | ~ "
                        "instead of and/or/not")

    def is_null(self) -> UnaryExpr:
        """True where the value is null."""
        return UnaryExpr(Operation.IS_NULL, self)

    def is_not_null(self) -> UnaryExpr:
        """True where the value is not null."""
        return UnaryExpr(Operation.IS_NOT_NULL, self)

    def is_in(self, values: list[Any] | Expr) -> BinaryExpr:
        """True where the value is one of `values`."""
        return BinaryExpr(Operation.IN, self, _wrap(values))

    def not_in(self, values: list[Any] | Expr) -> BinaryExpr:
        """True where the value is none of `values`."""
        return BinaryExpr(Operation.NOT_IN, self, _wrap(values))

    # --- element-wise functions (Arrow kernels) ------------------------------------------------
    def _fn(self, name: str, kernel: Callable[..., Any], *args: Any, **kwargs: Any) -> UDFExpr:
        return UDFExpr(name, kernel, [self], args, kwargs)

    def ceil(self) -> UDFExpr: return self._fn("ceil", pc.ceil)  # noqa: D102,E704
    def floor(self) -> UDFExpr: return self._fn("floor", pc.floor)  # noqa: D102,E704
    def round(self) -> UDFExpr: return self._fn("round", pc.round)  # noqa: D102,E704
    def trunc(self) -> UDFExpr: return self._fn("trunc", pc.trunc)  # noqa: D102,E704
    def ln(self) -> UDFExpr: return self._fn("ln", pc.ln)  # noqa: D102,E704
    def log10(self) -> UDFExpr: return self._fn("log10", pc.log10)  # noqa: D102,E704
    def log2(self) -> UDFExpr: return self._fn("log2", pc.log2)  # noqa: D102,E704
    def exp(self) -> UDFExpr: return self._fn("exp", pc.exp)  # noqa: D102,E704
    def sqrt(self) -> UDFExpr: return self._fn("sqrt", pc.sqrt)  # noqa: D102,E704
    def sin(self) -> UDFExpr: return self._fn("sin", pc.sin)  # noqa: D102,E704
    def cos(self) -> UDFExpr: return self._fn("cos", pc.cos)  # noqa: D102,E704
    def tan(self) -> UDFExpr: return self._fn("tan", pc.tan)  # noqa: D102,E704
    def asin(self) -> UDFExpr: return self._fn("asin", pc.asin)  # noqa: D102,E704
    def acos(self) -> UDFExpr: return self._fn("acos", pc.acos)  # noqa: D102,E704
    def atan(self) -> UDFExpr: return self._fn("atan", pc.atan)  # noqa: D102,E704
    def negate(self) -> UDFExpr: return self._fn("negate", pc.negate)  # noqa: D102,E704
    def sign(self) -> UDFExpr: return self._fn("sign", pc.sign)  # noqa: D102,E704
    def abs(self) -> UDFExpr: return self._fn("abs", pc.abs)  # noqa: D102,E704

    def power(self, exponent: Any) -> UDFExpr:
        """self ** exponent."""
        return UDFExpr("power", pc.power, [self, _wrap(exponent)], (), {})

    def cast(self, target_type: Any, *, safe: bool = True) -> UDFExpr:
        """The values converted to `target_type` (an ember.data.DataType, e.g.
        DataType.int64(); a pyarrow type is accepted too). Unsafe casts raise unless safe=False."""
        if isinstance(target_type, DataType):
            if target_type.is_python_type():
                raise TypeError("cast() needs an Arrow-backed DataType such as DataType.int64(); "
                                f"got {target_type!r}")
            arrow = target_type.to_arrow_dtype()
        elif isinstance(target_type, pa.DataType):
            arrow = target_type
        else:
            raise TypeError(f"target_type must be an ember.data.DataType (DataType.int64(), "
                            f"DataType.string()...), got {type(target_type).__name__}")
        return self._fn(f"cast[{arrow}]", pc.cast, target_type=arrow, safe=safe)

    @property
    def str(self) -> Any:
        """String functions (`col("s").str.upper()`, `.contains("x")`, `.len()`...)."""
        from ._internal.expr_namespaces import StringNamespace

        return StringNamespace(self)

    @property
    def list(self) -> Any:
        """List functions (`col("l").list.len()`, `.get(0)`, `[1:3]`, `.sort()`, `.flatten()`)."""
        from ._internal.expr_namespaces import ListNamespace

        return ListNamespace(self)

    @property
    def dt(self) -> Any:
        """Timestamp functions (`col("t").dt.year()`, `.strftime("%Y")`, `.floor("day")`)."""
        from ._internal.expr_namespaces import DatetimeNamespace

        return DatetimeNamespace(self)

    @property
    def struct(self) -> Any:
        """Struct fields (`col("s").struct["a"]`, `.field("a")`)."""
        from ._internal.expr_namespaces import StructNamespace

        return StructNamespace(self)


class ColumnExpr(Expr):
    """A column of the block, by name."""

    def __init__(self, name: str) -> None:
        if not isinstance(name, str) or not name:
            raise ValueError(f"col() needs a column name, got {name!r}")
        self._name = name

    @property
    def name(self) -> str:
        return self._name

    def eval(self, block: pa.Table) -> Any:
        if self._name not in block.column_names:
            raise KeyError(f"no column {self._name!r} in the block; the columns are "
                           f"{block.column_names}")
        return block.column(self._name)

    def to_pyarrow(self) -> pc.Expression:
        return pc.field(self._name)

    def __repr__(self) -> str:
        return f"col({self._name!r})"


class LiteralExpr(Expr):
    """A constant, broadcast to every row."""

    def __init__(self, value: Any) -> None:
        self.value = value

    def eval(self, block: pa.Table) -> Any:
        return self.value if isinstance(self.value, list) else pa.scalar(self.value)

    def to_pyarrow(self) -> pc.Expression:
        return pc.scalar(self.value)

    def __repr__(self) -> str:
        return f"lit({self.value!r})"


class BinaryExpr(Expr):
    """left <op> right."""

    def __init__(self, op: Operation, left: Expr, right: Expr) -> None:
        self.op, self.left, self.right = op, left, right

    def eval(self, block: pa.Table) -> Any:
        left = self.left.eval(block)
        if self.op in (Operation.IN, Operation.NOT_IN):
            vals = self.right.eval(block)
            vals = pa.array(vals if isinstance(vals, list) else [vals.as_py()]) \
                if not isinstance(vals, (pa.Array, pa.ChunkedArray)) else vals
            out = pc.is_in(left, value_set=vals)
            return pc.invert(out) if self.op is Operation.NOT_IN else out
        return _BINARY[self.op](left, self.right.eval(block))

    def to_pyarrow(self) -> pc.Expression:
        left = self.left.to_pyarrow()
        if self.op in (Operation.IN, Operation.NOT_IN):
            if not isinstance(self.right, LiteralExpr):
                raise ValueError("is_in/not_in need a literal list to convert to pyarrow")
            v = self.right.value
            out = left.isin(pa.array(v if isinstance(v, list) else [v]))
            return ~out if self.op is Operation.NOT_IN else out
        if self.op is Operation.ADD:
            return pc.add(left, self.right.to_pyarrow())
        return _BINARY[self.op](left, self.right.to_pyarrow())

    def __repr__(self) -> str:
        return f"({self.left!r} {self.op.value} {self.right!r})"


class UnaryExpr(Expr):
    """<op> operand: not, is_null, is_not_null."""

    def __init__(self, op: Operation, operand: Expr) -> None:
        self.op, self.operand = op, operand

    def eval(self, block: pa.Table) -> Any:
        return _UNARY[self.op](self.operand.eval(block))

    def to_pyarrow(self) -> pc.Expression:
        return _UNARY[self.op](self.operand.to_pyarrow())

    def __repr__(self) -> str:
        return f"{self.op.value}({self.operand!r})"


class UDFExpr(Expr):
    """An Arrow kernel (or any function of Arrow arrays) applied to argument expressions."""

    def __init__(self, fn_name: str, fn: Callable[..., Any], args: list[Expr], extra: tuple[Any, ...],
                 kwargs: dict[str, Any]) -> None:
        self.fn_name, self.fn, self.args, self.extra, self.kwargs = fn_name, fn, args, extra, kwargs

    def eval(self, block: pa.Table) -> Any:
        return self.fn(*[a.eval(block) for a in self.args], *self.extra, **self.kwargs)

    def __repr__(self) -> str:
        inner = ", ".join([repr(a) for a in self.args] + [repr(e) for e in self.extra] +
                          [f"{k}={v!r}" for k, v in self.kwargs.items()])
        return f"{self.fn_name}({inner})"


class AliasExpr(Expr):
    """An expression under another output name."""

    def __init__(self, expr: Expr, name: str) -> None:
        self.expr, self._name = expr, name

    @property
    def name(self) -> str:
        return self._name

    def eval(self, block: pa.Table) -> Any:
        return self.expr.eval(block)

    def to_pyarrow(self) -> pc.Expression:
        return self.expr.to_pyarrow()

    def __repr__(self) -> str:
        return f"{self.expr!r}.alias({self._name!r})"


def col(name: str) -> ColumnExpr:
    """A reference to column `name`."""
    return ColumnExpr(name)


def lit(value: Any) -> LiteralExpr:
    """A constant value."""
    return LiteralExpr(value)


class _TypedCall:
    """Calls a user function on Arrow arrays and returns an array of `arrow_type`; a callable
    class is instantiated on first use in each process (not pickled with the plan)."""

    def __init__(self, fn: Any, arrow_type: pa.DataType | None, ctor: tuple[Any, ...] | None = None) -> None:
        self.fn, self.arrow_type, self.ctor = fn, arrow_type, ctor
        self._obj: Any = None

    def __call__(self, *arrays: Any) -> Any:
        fn = self.fn
        if self.ctor is not None:
            if self._obj is None:
                self._obj = self.fn(*self.ctor[0], **self.ctor[1])
            fn = self._obj
        out = fn(*arrays)
        if not isinstance(out, (pa.Array, pa.ChunkedArray)):
            out = pa.array(out)
        if self.arrow_type is not None and out.type != self.arrow_type:
            out = out.cast(self.arrow_type)
        return out

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_obj": None}


def udf(return_dtype: DataType) -> Callable[[Any], Any]:
    """Decorator: a function (or callable class) of Arrow arrays becomes usable in
    expressions — `f(col("a"), col("b"))` is an expression whose values are f's output, cast to
    return_dtype. A decorated class is called with its constructor arguments first:
    `AddOffset(5)(col("x"))`; it is built once per worker process."""
    if not isinstance(return_dtype, DataType):
        raise TypeError(f"udf() needs return_dtype as an ember.data.DataType, got "
                        f"{type(return_dtype).__name__}")
    arrow = return_dtype.to_arrow_dtype() if return_dtype.is_arrow_type() else None

    def decorate(fn: Any) -> Any:
        name = getattr(fn, "__name__", "udf")

        def build(call: _TypedCall) -> Callable[..., UDFExpr]:
            def make(*args: Any) -> UDFExpr:
                return UDFExpr(name, call, [_wrap(a) for a in args], (), {})

            return make

        if isinstance(fn, type):
            def construct(*ctor_args: Any, **ctor_kwargs: Any) -> Callable[..., UDFExpr]:
                return build(_TypedCall(fn, arrow, (ctor_args, ctor_kwargs)))

            return construct
        return build(_TypedCall(fn, arrow))

    return decorate


pyarrow_udf = udf


def evaluate_column(expr: Expr, block: pa.Table) -> pa.ChunkedArray | pa.Array:
    """The expression's values on a block as one array of block.num_rows (scalars broadcast)."""
    out = expr.eval(block)
    if isinstance(out, pa.Scalar):
        return pa.repeat(out, block.num_rows)
    if isinstance(out, list):
        raise TypeError(f"{expr!r} is a list literal, not a column")
    return out


def to_arrow_expression(expr: Any) -> pc.Expression | Expr:
    """What filter(expr=...) runs: a pyarrow Expression from a string, a pyarrow Expression, or
    an Ember Expr (converted when it can be, for read pushdown; else kept to evaluate)."""
    if isinstance(expr, pc.Expression):
        return expr
    if isinstance(expr, Expr):
        try:
            return expr.to_pyarrow()
        except ValueError:
            return expr
    if isinstance(expr, str):
        from ._internal.filter_string import parse

        return parse(expr)
    raise TypeError(f"expr must be a string, an ember.data.expressions.Expr or a "
                    f"pyarrow.compute.Expression, got {type(expr).__name__}")


def uuid() -> Any:
    """An expression giving a random UUID4 string per row."""
    from ._internal.expr_extra import UUIDExpr

    return UUIDExpr()


def download(uri_column_name: str, *, filesystem: Any = None) -> Any:
    """An expression giving the bytes of the file each URI in column `uri_column_name` names
    (local paths, file:// or s3:// and other pyarrow.fs URIs, or paths on `filesystem`)."""
    from ._internal.expr_extra import DownloadExpr

    return DownloadExpr(uri_column_name, filesystem)


def unnest(expr: Expr) -> Any:
    """A struct expression spread into one column per field, for with_columns(unnest(...))."""
    from ._internal.expr_extra import UnnestExpr

    return UnnestExpr(expr)
