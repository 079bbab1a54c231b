"""The logs door: each node's log files through its raylet's LogService (proto/logs.proto), for
`ember.util.state.list_logs` / `get_log`, `ember logs` and the dashboard. Plain values out (dicts,
bytes), the kit's errors mapped to ValueError / LookupError / ConnectionError.
"""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any


def nodes(address: str, timeout_s: float = 10.0) -> list[dict[str, Any]]:
    """The cluster's alive nodes: node_id, node_ip, raylet_address, is_head (the head first)."""
    from ember_common import rpc
    from ember_common.proto import common_pb2

    from .state import _gcs, _unreachable

    client = _gcs(address, timeout_s)
    try:
        infos = client.get_all_node_info()
    except rpc.ServiceError as e:
        raise _unreachable(address, e) from None
    finally:
        client.close()
    out = [{"node_id": n.node_id, "node_ip": n.ip or n.raylet_address.rsplit(":", 1)[0],
            "raylet_address": n.raylet_address, "is_head": bool(n.is_head)}
           for n in infos if n.state == common_pb2.NodeInfo.ALIVE]
    return sorted(out, key=lambda n: (not n["is_head"], n["node_id"]))


def _error(e: Any, node_id: str) -> Exception:
    import grpc

    code, detail = e.code(), e.details() or ""
    if code == grpc.StatusCode.NOT_FOUND:
        return LookupError(detail)
    if code == grpc.StatusCode.INVALID_ARGUMENT:
        return ValueError(detail)
    return ConnectionError(f"the raylet of node {node_id[:12]} did not answer: {code.name} {detail}".rstrip())


def list_files(raylet_address: str, node_id: str, glob: str = "", timeout_s: float = 10.0) -> list[dict[str, Any]]:
    """The files of one node's log directory matching `glob`: name, size, mtime."""
    import grpc

    from ember_common import rpc
    from ember_common.proto import logs_pb2, logs_pb2_grpc

    ch = rpc.sync_channel(raylet_address)
    try:
        reply = logs_pb2_grpc.LogServiceStub(ch).ListLogs(logs_pb2.ListLogsRequest(glob=glob), timeout=timeout_s)
    except grpc.RpcError as e:
        raise _error(e, node_id) from None
    finally:
        ch.close()
    return [{"name": f.name, "size": f.size, "mtime": f.mtime} for f in reply.files]


class LogStream:
    """One StreamLog call as an iterator of byte chunks; cancel() (from any thread) ends it, a
    blocked iteration included."""

    def __init__(self, raylet_address: str, node_id: str, request: Any, timeout_s: float | None,
                 follow: bool) -> None:
        from ember_common import rpc
        from ember_common.proto import logs_pb2_grpc

        self.node_id, self.follow = node_id, follow
        self._ch = rpc.sync_channel(raylet_address)
        self._call = logs_pb2_grpc.LogServiceStub(self._ch).StreamLog(request, timeout=timeout_s)
        self._cancelled = False

    def __iter__(self) -> Iterator[bytes]:
        import grpc

        try:
            for chunk in self._call:
                if chunk.data:
                    yield chunk.data
        except grpc.RpcError as e:
            code = e.code()
            if self._cancelled or (code == grpc.StatusCode.DEADLINE_EXCEEDED and self.follow):
                return  # stopped by the caller, or a bounded follow ended
            raise _error(e, self.node_id) from None
        finally:
            self.cancel()

    def cancel(self) -> None:
        """Ends the call and closes its channel (idempotent)."""
        if not self._cancelled:
            self._cancelled = True
            self._call.cancel()
            self._ch.close()


def stream(raylet_address: str, node_id: str, *, filename: str = "", pid: int = 0, suffix: str = "",
           lines: int = -1, follow: bool = False, interval_s: float = 0.0,
           timeout_s: float | None = 30.0) -> LogStream:
    """One file's content in chunks (see StreamLog); with follow, until the caller cancels or
    stops iterating. timeout_s bounds the whole call (None: none)."""
    from ember_common.proto import logs_pb2

    request = logs_pb2.StreamLogRequest(filename=filename, pid=pid, suffix=suffix, lines=lines, follow=follow,
                                        interval_s=interval_s)
    return LogStream(raylet_address, node_id, request, timeout_s, follow)
