"""Filter strings such as "score > 0.8 and lang == 'zh'" (Ray Data's `filter(expr=...)`) parsed
into a `pyarrow.compute.Expression` that parquet reads can evaluate while reading."""
from __future__ import annotations

import ast
from typing import Any

import pyarrow.compute as pc

_CMP = {ast.Gt: "__gt__", ast.GtE: "__ge__", ast.Lt: "__lt__", ast.LtE: "__le__",
        ast.Eq: "__eq__", ast.NotEq: "__ne__"}
_BIN = {ast.Add: "add", ast.Sub: "subtract", ast.Mult: "multiply", ast.Div: "divide"}


def parse(expr: str) -> pc.Expression:
    """A pyarrow Expression from a filter string; ValueError naming what is wrong."""
    try:
        tree = ast.parse(expr, mode="eval")
    except SyntaxError as e:
        raise ValueError(f"invalid filter expression {expr!r}: {e.msg}") from None
    return _conv(tree.body, expr)


def _conv(n: ast.AST, src: str) -> Any:
    if isinstance(n, ast.BoolOp):
        vals = [_conv(v, src) for v in n.values]
        out = vals[0]
        for v in vals[1:]:
            out = (out & v) if isinstance(n.op, ast.And) else (out | v)
        return out
    if isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.Not):
        return ~_conv(n.operand, src)
    if isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.USub):
        return pc.negate(_conv(n.operand, src))
    if isinstance(n, ast.Compare):
        left = _conv(n.left, src)
        out = None
        for op, right in zip(n.ops, n.comparators, strict=False):
            r = _conv(right, src)
            if isinstance(op, (ast.In, ast.NotIn)):
                if not isinstance(right, (ast.List, ast.Tuple, ast.Set)):
                    raise ValueError(f"'in' needs a literal list in {src!r}")
                vals = [ast.literal_eval(e) for e in right.elts]
                term = left.isin(vals)
                term = ~term if isinstance(op, ast.NotIn) else term
            elif type(op) in _CMP:
                term = getattr(left, _CMP[type(op)])(r)
            else:
                raise ValueError(f"unsupported comparison {type(op).__name__} in {src!r}")
            out = term if out is None else (out & term)
            left = r
        return out
    if isinstance(n, ast.BinOp) and type(n.op) in _BIN:
        return getattr(pc, _BIN[type(n.op)])(_conv(n.left, src), _conv(n.right, src))
    if isinstance(n, ast.Name):
        return pc.field(n.id)
    if isinstance(n, ast.Constant):
        return pc.scalar(n.value)
    if isinstance(n, (ast.List, ast.Tuple)):
        return [ast.literal_eval(e) for e in n.elts]
    if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "is_null" and n.args:
        return _conv(n.args[0], src).is_null()
    raise ValueError(f"unsupported syntax {ast.dump(n)[:60]} in filter expression {src!r}")
