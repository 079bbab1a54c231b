"""Tail this node's worker log files and publish their lines to the GCS.

Every period_s: list `worker-*.{out,err}` in logs_dir; open each, read past its saved offset,
close it (no handle is kept between rounds). A partial last line waits for its newline (flushed
anyway after 1 s or at 64 KiB). Marker lines ("\\x1e" job_hex "\\x1f" name) switch the file's
job/name and are never published; other lines go to a pending list, grouped into one LogBatch per
run of consecutive lines of one (file, job, name) and published once per round (in calls of at
most PUBLISH_BYTES, under the GCS's message limit). If publish fails
they stay pending (oldest beyond MAX_PENDING dropped) for the next round. A file whose size did
not change is only stat'ed, not opened; a deleted file is forgotten (its partial line flushed).

Two bounds keep a worker that prints in a tight loop from flooding the drivers or filling the
disk. Rate: each file may publish max_lines_per_s lines a second (a token bucket holding one
second's worth); lines beyond it are dropped from the stream (they stay in the file) and one
notice per second per (job, task name), "[ember] N lines of output dropped ...", goes to the
driver in their place. Size: a file of one of this raylet's workers, or one of `own_files`, that
reaches max_bytes is rotated (log_rotation: copied to NAME.1, truncated) after the monitor has
read it; what it had not read yet by then is counted in the next notice as skipped bytes.
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from ember_common.proto import gcs_pb2

from . import log_rotation

log = logging.getLogger(__name__)

LOG_MARKER, LOG_SEP = "\x1e", "\x1f"
_MARKER_BYTES = LOG_MARKER.encode()
MAX_PENDING, MAX_PARTIAL, READ_CHUNK = 10_000, 64 * 1024, 4 * 1024 * 1024
PUBLISH_BYTES = 4 * 1024 * 1024  # one PublishLogs call, far under the GCS's message limit
PARTIAL_AGE_S = 1.0
NOTICE_EVERY_S = 1.0


@dataclass
class _File:
    worker_id: str
    is_err: bool
    offset: int = 0
    job: bytes = b""
    name: str = ""
    buf: bytes = b""  # partial last line
    buf_since: float = 0.0  # when the partial line began
    tokens: float = -1.0  # the rate limit's bucket (-1: full, not yet used)
    refilled: float = 0.0
    dropped: dict[tuple[bytes, str], int] = field(default_factory=dict)  # (job, name) -> lines
    skipped_bytes: int = 0  # rotated away before they were read
    noticed: float = 0.0  # when the last notice went out
    pid: int = 0  # the worker's pid as last known (0: never known)


class LogMonitor:
    """Publishes the lines appended to this node's worker log files, tagged by job and task."""

    def __init__(self, logs_dir: str, node_id: str,
                 publish: Callable[[list[gcs_pb2.LogBatch]], Awaitable[None]],
                 pid_of: Callable[[str], int | None], period_s: float = 0.1, *,
                 max_lines_per_s: float = 0.0, max_bytes: int = 0, backup_count: int = 5,
                 own_files: tuple[str, ...] = (), mine: Callable[[str], bool] | None = None) -> None:
        self.logs_dir, self.node_id, self.period_s = logs_dir, node_id, period_s
        self._publish, self._pid_of = publish, pid_of
        self.max_lines_per_s = max_lines_per_s  # 0: no limit
        self.max_bytes, self.backup_count = max_bytes, backup_count  # max_bytes 0: no rotation
        self.own_files = own_files  # other files of this node to rotate (its services' output)
        # Which worker ids are this raylet's (None: every file in the directory): nodes of one
        # machine may share a log directory, and each line must reach the driver once.
        self._mine = mine
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
        while self._pending:  # in calls of at most PUBLISH_BYTES: the GCS's message limit
            n = self._fitting()
            try:
                await self._publish(self._batches(self._pending[:n]))
            except Exception as e:  # GCS down: keep the lines and retry next round
                log.log(logging.WARNING if final else logging.DEBUG,
                        "log monitor: publish failed (%s); %d lines pending", e, len(self._pending))
                return
            del self._pending[:n]
        self._warned = False

    def _fitting(self) -> int:
        """How many pending lines (at least one) the next publish carries."""
        total = 0
        for i, entry in enumerate(self._pending):
            total += len(entry[5]) + 64
            if total > PUBLISH_BYTES and i:
                return i
        return len(self._pending)

    def _pid(self, path: str, wid: str) -> int:
        """The worker's pid: its raylet's, else the last one known. A worker that has exited (or
        a child it left writing to its file) still shows under its own pid, not 0."""
        f = self._files.get(path)
        pid = self._pid_of(wid)
        if pid:
            if f is not None:
                f.pid = pid
            return pid
        return f.pid if f is not None else 0

    def _batches(self, pending: list[tuple[str, str, bool, bytes, str, str]]) -> list[gcs_pb2.LogBatch]:
        out: list[gcs_pb2.LogBatch] = []
        last: tuple[str, bytes, str] | None = None
        for path, wid, is_err, job, name, line in pending:
            if (path, job, name) != last:
                last = (path, job, name)
                out.append(gcs_pb2.LogBatch(job_id=job, node_id=self.node_id,
                                            pid=self._pid(path, wid), name=name, is_err=is_err))
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
                wid = fn[len("worker-"):-4]
                if self._mine is None or self._mine(wid):
                    self._files[path] = _File(wid, fn.endswith(".err"), pid=self._pid_of(wid) or 0)
        for path, f in list(self._files.items()):
            gone = path not in names or not self._read(path, f, now)
            if f.buf and (gone or final or now - f.buf_since >= PARTIAL_AGE_S
                          or len(f.buf) >= MAX_PARTIAL):
                self._line(path, f, f.buf, now)
                f.buf = b""
            if (f.dropped or f.skipped_bytes) and (gone or final or now - f.noticed >= NOTICE_EVERY_S):
                self._notice(path, f, now)
            if gone:
                del self._files[path]
        for name in self.own_files:
            log_rotation.rotate_if_big(os.path.join(self.logs_dir, name), self.max_bytes, self.backup_count)

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
        f.offset += len(data)
        # Rotate right after the read, before the lines are handled: what the writer appends
        # meanwhile lands in the copy unread (counted in the next notice).
        if 0 < self.max_bytes <= size and self._pid_of(f.worker_id) is not None:
            self._rotate(path, f)
        if data:
            *lines, rest = (f.buf + data).split(b"\n")
            f.buf_since = now if lines or not f.buf else f.buf_since
            f.buf = rest
            for raw in lines:
                self._line(path, f, raw, now)
        return True

    def _rotate(self, path: str, f: _File) -> None:
        """Rotates one of this raylet's worker files that reached max_bytes (log_rotation)."""
        try:
            copied = log_rotation.rotate(path, self.backup_count)
        except OSError as e:
            log.debug("log monitor: cannot rotate %s: %s", path, e)
            return
        f.skipped_bytes += max(0, copied - f.offset)
        f.offset = 0

    def _line(self, path: str, f: _File, raw: bytes, now: float) -> None:
        if not raw.startswith(_MARKER_BYTES):
            if self.max_lines_per_s > 0 and not self._take(f, now):  # dropped before decoding
                key = (f.job, f.name)
                f.dropped[key] = f.dropped.get(key, 0) + 1
                return
            self._pending.append((path, f.worker_id, f.is_err, f.job, f.name,
                                  raw.decode("utf-8", errors="replace")))
            return
        text = raw.decode("utf-8", errors="replace")
        job_hex, _, f.name = text[1:].partition(LOG_SEP)
        try:
            f.job = bytes.fromhex(job_hex)
        except ValueError:
            f.job = b""

    def _take(self, f: _File, now: float) -> bool:
        """One line's worth of the file's rate budget (a bucket of one second's lines)."""
        cap = self.max_lines_per_s
        if f.tokens < 0:
            f.tokens, f.refilled = cap, now
        f.tokens = min(cap, f.tokens + (now - f.refilled) * cap)
        f.refilled = now
        if f.tokens < 1:
            return False
        f.tokens -= 1
        return True

    def _notice(self, path: str, f: _File, now: float) -> None:
        """Tells the drivers what the limits kept from them (one line per job and task name)."""
        where = f"{os.path.basename(path)} on node {self.node_id[:12]}"
        for (job, name), n in f.dropped.items():
            self._pending.append((path, f.worker_id, f.is_err, job, name,
                                  f"[ember] {n} lines of output dropped (over {self.max_lines_per_s:g} "
                                  f"lines/s, EMBER_LOG_TO_DRIVER_MAX_LINES_PER_S); the file keeps them: {where}"))
        if f.skipped_bytes:
            self._pending.append((path, f.worker_id, f.is_err, f.job, f.name,
                                  f"[ember] {f.skipped_bytes} bytes of output not forwarded: {where} "
                                  f"rotated (EMBER_LOG_MAX_BYTES) before they were read"))
        f.dropped, f.skipped_bytes, f.noticed = {}, 0, now
