"""Tail this node's worker log files and publish their lines to the GCS.

Every period_s: list `worker-*.{out,err}` in logs_dir; open each, read past its saved offset,
close it (no handle is kept between rounds). A partial last line waits for its newline (flushed
anyway after 1 s or at 64 KiB). Marker lines ("\\x1e" job_hex "\\x1f" name) switch the file's
job/name and are never published; other lines go to a pending list, grouped into one LogBatch per
run of consecutive lines of one (file, job, name) and published once per round. If publish fails
they stay pending (oldest beyond MAX_PENDING dropped) for the next round. A file whose size did
not change is only stat'ed, not opened; a deleted file is forgotten (its partial line flushed).
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from ember_common.proto import gcs_pb2

log = logging.getLogger(__name__)

LOG_MARKER, LOG_SEP = "\x1e", "\x1f"
MAX_PENDING, MAX_PARTIAL, READ_CHUNK = 10_000, 64 * 1024, 4 * 1024 * 1024
PARTIAL_AGE_S = 1.0


@dataclass
class _File:
    worker_id: str
    is_err: bool
    offset: int = 0
    job: bytes = b""
    name: str = ""
    buf: bytes = b""  # partial last line
    buf_since: float = 0.0  # when the partial line began


class LogMonitor:
    """Publishes the lines appended to this node's worker log files, tagged by job and task."""

    def __init__(self, logs_dir: str, node_id: str,
                 publish: Callable[[list[gcs_pb2.LogBatch]], Awaitable[None]],
                 pid_of: Callable[[str], int | None], period_s: float = 0.1) -> None:
        self.logs_dir, self.node_id, self.period_s = logs_dir, node_id, period_s
        self._publish, self._pid_of = publish, pid_of
        self._files: dict[str, _File] = {}
        # (path, worker_id, is_err, job_id, name, line), oldest first.
        self._pending: list[tuple[str, str, bool, bytes, str, str]] = []
        self._warned = False

    async def run(self, stop: asyncio.Event) -> None:
        """Poll until `stop` is set, then do one final read (partial lines included) + publish."""
        while not stop.is_set():
            await self.poll_once()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.period_s)
        await self.poll_once(final=True)

    async def poll_once(self, final: bool = False) -> None:
        """One round: read new output of every worker log file, then publish what is pending."""
        self._scan(final)
        if len(self._pending) > MAX_PENDING:
            if not self._warned:
                log.warning("log monitor: cannot publish; dropping oldest lines beyond %d",
                            MAX_PENDING)
                self._warned = True
            del self._pending[:len(self._pending) - MAX_PENDING]
        if not self._pending:
            return
        try:
            await self._publish(self._batches())
        except Exception as e:  # GCS down: keep the lines and retry next round
            log.log(logging.WARNING if final else logging.DEBUG,
                    "log monitor: publish failed (%s); %d lines pending", e, len(self._pending))
            return
        self._pending.clear()
        self._warned = False

    def _batches(self) -> list[gcs_pb2.LogBatch]:
        out: list[gcs_pb2.LogBatch] = []
        last: tuple[str, bytes, str] | None = None
        for path, wid, is_err, job, name, line in self._pending:
            if (path, job, name) != last:
                last = (path, job, name)
                out.append(gcs_pb2.LogBatch(job_id=job, node_id=self.node_id,
                                            pid=self._pid_of(wid) or 0, name=name, is_err=is_err))
            out[-1].lines.append(line)
        return out

    def _scan(self, final: bool) -> None:
        try:
            names = {os.path.join(self.logs_dir, n): n for n in os.listdir(self.logs_dir)
                     if n.startswith("worker-") and n.endswith((".out", ".err"))}
        except OSError:  # dir missing or unreadable: keep all state, try again next round
            return
        now = time.monotonic()
        for path, fn in names.items():
            if path not in self._files:
                self._files[path] = _File(fn[len("worker-"):-4], fn.endswith(".err"))
        for path, f in list(self._files.items()):
            gone = path not in names or not self._read(path, f, now)
            if f.buf and (gone or final or now - f.buf_since >= PARTIAL_AGE_S
                          or len(f.buf) >= MAX_PARTIAL):
                self._line(path, f, f.buf)
                f.buf = b""
            if gone:
                del self._files[path]

    def _read(self, path: str, f: _File, now: float) -> bool:
        """Append the new complete lines of one file to pending; False if the file is gone."""
        try:
            size = os.stat(path).st_size
            if size == f.offset:
                return True
            with open(path, "rb") as fh:
                if size < f.offset:  # truncated: start over
                    f.offset, f.buf = 0, b""
                fh.seek(f.offset)
                data = fh.read(READ_CHUNK)
        except FileNotFoundError:
            return False
        except OSError as e:
            log.debug("log monitor: cannot read %s: %s", path, e)
            return True
        if data:
            f.offset += len(data)
            *lines, rest = (f.buf + data).split(b"\n")
            f.buf_since = now if lines or not f.buf else f.buf_since
            f.buf = rest
            for raw in lines:
                self._line(path, f, raw)
        return True

    def _line(self, path: str, f: _File, raw: bytes) -> None:
        text = raw.decode("utf-8", errors="replace")
        if not text.startswith(LOG_MARKER):
            self._pending.append((path, f.worker_id, f.is_err, f.job, f.name, text))
            return
        job_hex, _, f.name = text[1:].partition(LOG_SEP)
        try:
            f.job = bytes.fromhex(job_hex)
        except ValueError:
            f.job = b""
