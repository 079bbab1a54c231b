"""Reading a SQL query through a DB-API 2 connection factory (Ray's read_sql).

The driver asks the database once whether it can page the query (`LIMIT n OFFSET m` over the
query as a subquery) and how many rows it returns; if it can, the rows are split into up to
`parallelism` read tasks, each running its own page on its own connection. Otherwise one task
runs the query. Each task fetches rows in batches of FETCH_ROWS and yields Arrow blocks.
"""
from __future__ import annotations

import functools
from typing import Any, Callable, Iterator

import numpy as np
import pyarrow as pa

from ember.data import block as B

from .file_based import ReadTask

FETCH_ROWS = 4096


def _run(connection_factory: Callable[[], Any], query: str) -> Iterator[pa.Table]:
    conn = connection_factory()
    try:
        cur = conn.cursor()
        try:
            cur.execute(query)
            names = [d[0] for d in cur.description or []]
            while True:
                rows = cur.fetchmany(FETCH_ROWS)
                if not rows:
                    break
                yield B.rows_to_block([dict(zip(names, r, strict=True)) for r in rows])
        finally:
            cur.close()
    finally:
        conn.close()


def _scalar(connection_factory: Callable[[], Any], query: str) -> Any:
    conn = connection_factory()
    try:
        cur = conn.cursor()
        try:
            cur.execute(query)
            row = cur.fetchone()
            return row[0] if row else None
        finally:
            cur.close()
    finally:
        conn.close()


class SQLDatasource:
    """The rows of one SQL query, paged with LIMIT/OFFSET when the database allows it."""

    supports_projection_pushdown = False
    supports_filter_pushdown = False
    include_paths = False

    def __init__(self, sql: str, connection_factory: Callable[[], Any]) -> None:
        if not isinstance(sql, str) or not sql.strip():
            raise ValueError(f"read_sql: sql must be a non-empty string, got {sql!r}")
        if not callable(connection_factory):
            raise TypeError("read_sql: connection_factory must be a callable returning a DB-API "
                            f"connection, got {type(connection_factory).__name__}")
        self.sql = sql.strip().rstrip(";")
        self.connection_factory = connection_factory
        self._count: int | None = None
        try:  # can the query be paged? (and its row count, for sharding)
            _scalar(connection_factory, f"SELECT * FROM ({self.sql}) AS T LIMIT 1 OFFSET 0")
            self._count = int(_scalar(connection_factory, f"SELECT COUNT(*) FROM ({self.sql}) AS T"))
        except Exception:  # noqa: BLE001 - any driver error: read with one task
            self._count = None

    def estimate_inmemory_data_size(self) -> None:
        return None

    def num_rows(self) -> int | None:
        return self._count

    def get_read_tasks(self, parallelism: int, columns: Any = None,
                       filter: Any = None) -> list[ReadTask]:
        if self._count is None:
            fn = functools.partial(_run, self.connection_factory, self.sql)
            return [ReadTask(fn, [], None, 0)]
        n = self._count
        k = max(1, min(parallelism, n))
        bounds = np.linspace(0, n, k + 1).astype(np.int64)
        tasks = []
        for a, b in zip(bounds, bounds[1:], strict=False):
            q = f"SELECT * FROM ({self.sql}) AS T LIMIT {int(b - a)} OFFSET {int(a)}"
            tasks.append(ReadTask(functools.partial(_run, self.connection_factory, q), [],
                                  int(b - a), 0))
        return tasks
