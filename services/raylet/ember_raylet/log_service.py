"""The raylet's LogService (proto/logs.proto): this node's log directory, listed and streamed to
the CLI (`ember logs`), the state API (`list_logs` / `get_log`) and the dashboard.

A thin shell over log_files: it validates, resolves a worker's pid to its file through the
workers that registered here (`WorkerPids`), reads in chunks of log_files.CHUNK_BYTES off the
event loop, and with `follow` polls the file every interval until the caller cancels or the
raylet stops.
"""
from __future__ import annotations

import asyncio
import math
from collections import OrderedDict
from collections.abc import AsyncIterator

from ember_common import rpc
from ember_common.proto import logs_pb2, logs_pb2_grpc

from . import log_files

FOLLOW_INTERVAL_S = 0.2
MAX_REMEMBERED = 10_000


class WorkerPids:
    """pid -> worker id of the workers that registered with this raylet, alive or exited (the
    newest MAX_REMEMBERED), so `ember logs worker --pid` finds a dead worker's output too."""

    def __init__(self, limit: int = MAX_REMEMBERED) -> None:
        self._by_pid: OrderedDict[int, str] = OrderedDict()
        self._limit = limit

    def add(self, pid: int, worker_id: str) -> None:
        """A worker registered (a pid reused later names the newer worker)."""
        self._by_pid.pop(pid, None)
        self._by_pid[pid] = worker_id
        while len(self._by_pid) > self._limit:
            self._by_pid.popitem(last=False)

    def get(self, pid: int) -> str | None:
        """The worker id of `pid`, or None."""
        return self._by_pid.get(pid)


class StartedWorkers:
    """The worker ids this raylet started (the newest MAX_REMEMBERED): the log monitor forwards
    only their files, since nodes of one machine may share a log directory."""

    def __init__(self, limit: int = MAX_REMEMBERED * 10) -> None:
        self._ids: OrderedDict[str, None] = OrderedDict()
        self._limit = limit

    def add(self, worker_id: str) -> str:
        """Records a worker id about to start; returns it."""
        self._ids[worker_id] = None
        while len(self._ids) > self._limit:
            self._ids.popitem(last=False)
        return worker_id

    def __contains__(self, worker_id: object) -> bool:
        return worker_id in self._ids


class LogServiceServicer(logs_pb2_grpc.LogServiceServicer):
    """Serves the files of `logs_dir`, never anything outside it (log_files.resolve)."""

    def __init__(self, logs_dir: str, node_id: str, pids: WorkerPids, stop: asyncio.Event) -> None:
        self.logs_dir, self.node_id, self.pids, self.stop = logs_dir, node_id, pids, stop

    @rpc.rpc_errors
    async def ListLogs(self, request: logs_pb2.ListLogsRequest, context: rpc.Context) -> logs_pb2.ListLogsReply:
        files = await asyncio.to_thread(log_files.list_files, self.logs_dir, request.glob)
        return logs_pb2.ListLogsReply(node_id=self.node_id, files=[
            logs_pb2.LogFileInfo(name=f.name, size=f.size, mtime=f.mtime) for f in files])

    def _name(self, request: logs_pb2.StreamLogRequest) -> str:
        if request.filename and request.pid:
            raise rpc.InvalidArgument("give filename or pid, not both")
        if request.pid:
            wid = self.pids.get(request.pid)
            if wid is None:
                raise rpc.NotFound(f"no worker with pid {request.pid} started on node {self.node_id[:12]}")
            return log_files.worker_file(wid, request.suffix or "out")
        if request.suffix:
            raise rpc.InvalidArgument("suffix goes with pid")
        return request.filename

    @rpc.rpc_errors
    async def StreamLog(self, request: logs_pb2.StreamLogRequest,
                        context: rpc.Context) -> AsyncIterator[logs_pb2.LogChunk]:
        name = self._name(request)
        interval = request.interval_s
        if not math.isfinite(interval) or interval < 0:
            raise rpc.InvalidArgument(f"interval_s must be a finite number >= 0, got {interval}")
        interval = min(max(interval or FOLLOW_INTERVAL_S, 0.05), 10.0)
        try:
            path = log_files.resolve(self.logs_dir, name)
            offset = await asyncio.to_thread(log_files.tail_offset, path, request.lines)
        except log_files.NoLogFile as e:
            raise rpc.NotFound(f"{e} of node {self.node_id[:12]}") from None
        first = True
        while True:
            try:
                data, offset = await asyncio.to_thread(log_files.read_chunk, path, offset)
            except FileNotFoundError:
                if not request.follow:
                    raise rpc.NotFound(f"log file {name!r} of node {self.node_id[:12]} is gone") from None
                data = b""  # deleted while followed: wait for it to come back
            if data or first:
                yield logs_pb2.LogChunk(data=data, filename=name if first else "")
                first = False
            if len(data) == log_files.CHUNK_BYTES:
                continue  # more is there now
            if not request.follow or self.stop.is_set():
                return
            try:
                await asyncio.wait_for(self.stop.wait(), interval)
                return  # the raylet stops
            except asyncio.TimeoutError:
                pass
