"""`ember microbenchmark`: the workloads of `ray microbenchmark`, under the same names. Its flags
are the benchmark runner's own (`ember._tools.perf`), so `main` hands it the raw arguments."""
from __future__ import annotations

from typing import Any

COMMAND = "microbenchmark"


def add_parser(sub: Any) -> None:
    """`microbenchmark` (listed in --help; parsed by the runner)."""
    sub.add_parser(COMMAND, help="Ray-compatible microbenchmarks", add_help=False)


def run(argv: list[str]) -> int:
    """Runs the benchmarks with the runner's own flags."""
    from ember._tools import perf

    return int(perf.main(argv))
