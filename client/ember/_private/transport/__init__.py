"""Transport: how tasks and replies travel between a caller and a worker.

- task_stream: pushes over one long-lived gRPC stream per (caller, worker) pair;
- wire: the direct transport's frames and the caller's side on a plain TCP socket;
  wire_server: the worker's side of it;
- core_worker_server: the CoreWorker gRPC service every driver and worker runs.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from .. import lazy_face

if TYPE_CHECKING:
    from .core_worker_server import CoreWorkerServicer as CoreWorkerServicer
    from .task_stream import TaskStreams as TaskStreams
    from .wire import DirectConn as DirectConn
    from .wire import FrameDecoder as FrameDecoder
    from .wire_server import DirectServer as DirectServer

# The names other packages use, by the module that defines them. They load on first use: the
# package itself imports nothing, so importing one of its modules costs only that module.
_NAMES = {
    "CoreWorkerServicer": "core_worker_server",
    "DirectConn": "wire",
    "DirectServer": "wire_server",
    "FrameDecoder": "wire",
    "TaskStreams": "task_stream",
}
__all__ = sorted(_NAMES)

__getattr__ = lazy_face(__name__, _NAMES)
