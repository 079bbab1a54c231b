"""`Dataset.__repr__` as Ray prints it (pure: no cluster).

A lazy dataset prints its logical operators newest first, one per line, each input indented
under its consumer with `+- `, sources left out, then the dataset line:

    Filter(g)
    +- Map(f)
       +- Dataset(num_rows=10, schema={id: int64})

A materialized dataset prints only `MaterializedDataset(num_blocks=2, num_rows=10,
schema={id: int64})`. A dataset line longer than 80 characters puts each field on its own line
(and each column too when the schema alone is too long). Unknown counts print `?`, an unknown
schema `Unknown schema`.
"""
from __future__ import annotations

from typing import Any, Sequence

LINE_LIMIT = 80
MIN_FIELD_LENGTH = 10
INDENT = " " * 3


def plan_lines(op: Any, depth: int = 0, out: list[str] | None = None) -> tuple[list[str], int]:
    """The operator lines (sources skipped) and the depth of the deepest branch."""
    out = [] if out is None else out
    if not op.inputs:  # a source: Read or InputData
        return out, depth
    out.append(op.name if depth == 0 else f"{' ' * ((depth - 1) * 3)}+- {op.name}")
    deepest = depth
    for i in op.inputs:
        _, d = plan_lines(i, depth + 1, out)
        deepest = max(deepest, d)
    return out, deepest


def _type_str(t: Any) -> str:
    return t.__name__ if hasattr(t, "__name__") else str(t)


def format_dataset(cls_name: str, lines: Sequence[str], depth: int, num_blocks: int | None,
                   count: int | None, schema: Sequence[tuple[str, Any]] | None) -> str:
    """The whole repr: operator lines, then the dataset line under them."""
    if schema is None:
        schema_str = "Unknown schema"
    else:
        schema_str = "{" + ", ".join(f"{n}: {_type_str(t)}" for n, t in schema) + "}"
    count_str = "?" if count is None else str(count)
    blocks = f"num_blocks={num_blocks}, " if num_blocks else ""
    line = f"{cls_name}({blocks}num_rows={count_str}, schema={schema_str})"
    pad = INDENT * depth
    if len(line) > LINE_LIMIT:
        if schema is not None and len(f"{pad}{INDENT}schema={schema_str}") > LINE_LIMIT:
            cols = []
            for n, t in schema:
                c = f"{pad}{INDENT * 2}{n}: {_type_str(t)}"
                if len(c) > LINE_LIMIT:
                    suffix = f"...: {t}"
                    c = c[:max(LINE_LIMIT - len(suffix), MIN_FIELD_LENGTH)] + suffix
                cols.append(c)
            schema_str = "{\n" + ",\n".join(cols) + f"\n{pad}{INDENT}}}"
        blocks = f"\n{pad}{INDENT}num_blocks={num_blocks}," if num_blocks else ""
        line = (f"{cls_name}({blocks}\n{pad}{INDENT}num_rows={count_str},"
                f"\n{pad}{INDENT}schema={schema_str}\n{pad})")
    head = "".join(f"{ln}\n" for ln in lines)
    return head + (line if depth == 0 else f"{INDENT * (depth - 1)}+- {line}")
