"""Per-operator progress bars on the driver's terminal (quiet when stderr is not a TTY or
`DataContext.enable_progress_bars` is off)."""
from __future__ import annotations

import sys
import time
from typing import IO, Any


def _fmt_count(n: float) -> str:
    for unit, div in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(n) >= div:
            return f"{n / div:.1f}{unit}"
    return f"{int(n)}"


def render_line(name: str, done: int, total: int | None, elapsed_s: float, width: int = 24,
                finished: bool = False) -> str:
    """One bar: `- MapBatches(f): 40%|█████     | 4.0k/10.0k rows [1.2s, 3.3k rows/s]`."""
    rate = done / elapsed_s if elapsed_s > 0 else 0.0
    if finished:
        total = done
    if total:
        frac = min(1.0, done / total) if total else 1.0
        filled = int(frac * width)
        bar = "█" * filled + " " * (width - filled)
        head = f"{int(frac * 100):3d}%|{bar}| {_fmt_count(done)}/{_fmt_count(total)}"
    else:
        head = f"{_fmt_count(done)}/?"
    return f"- {name}: {head} rows [{elapsed_s:.1f}s, {_fmt_count(rate)} rows/s]"


class ProgressBars:
    """Redraws one line per operator in place, at most every `interval_s`."""

    def __init__(self, names: list[str], enabled: bool, stream: IO[str] | None = None,
                 interval_s: float = 0.5) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = enabled and _isatty(self.stream)
        self.names = names
        self.interval_s = interval_s
        self._last = 0.0
        self._drawn = 0
        self._start = time.monotonic()

    def update(self, rows: list[int], totals: list[int | None], finished: list[bool],
               force: bool = False) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if not force and now - self._last < self.interval_s:
            return
        self._last = now
        el = now - self._start
        lines = [render_line(n, r, t, el, finished=f)
                 for n, r, t, f in zip(self.names, rows, totals, finished, strict=False)]
        out = []
        if self._drawn:
            out.append(f"\x1b[{self._drawn}F")
        for ln in lines:
            out.append("\x1b[2K" + ln[:200] + "\n")
        self._drawn = len(lines)
        try:
            self.stream.write("".join(out))
            self.stream.flush()
        except (OSError, ValueError):
            self.enabled = False

    def close(self, rows: list[int], totals: list[int | None]) -> None:
        self.update(rows, totals, [True] * len(rows), force=True)


def _isatty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False
