"""A client's session: a real driver of the cluster, one process per connected client.

The proxy starts `python -m ember.util.client.session --gcs-address ADDR` for each client and
forwards that client's calls here; the process prints the port it serves on (loopback only,
token-checked like every Ember port) as its first stdout line. Connect runs `ember.init` against
the cluster with the client's options; each Call runs one operation (`ops.py`) with the public
`ember` API. The process dies with the proxy (PR_SET_PDEATHSIG) and ends its job on SIGTERM, so
one client's crash or leak never touches another client or the proxy.
"""
from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import logging
import os
import sys
from typing import Any, AsyncIterator

import grpc

from ember_common import auth, rpc

from . import protocol
from .ops import Operations

log = logging.getLogger(__name__)


class SessionServer:
    """Connect and Call for one client, over one `Operations` (its tables and its driver)."""

    def __init__(self, gcs_address: str) -> None:
        self.gcs_address = gcs_address
        self.ops = Operations()
        # Operations block (ember.get, ember.wait): they run on threads, not on the loop.
        self.pool = concurrent.futures.ThreadPoolExecutor(max_workers=32, thread_name_prefix="client-op")
        self.closed = asyncio.Event()

    async def connect(self, request: bytes, context: Any) -> AsyncIterator[bytes]:
        loop = asyncio.get_running_loop()
        try:
            info = await loop.run_in_executor(self.pool, self.ops.init, self.gcs_address,
                                              protocol.loads(request, _no_ids))
            yield protocol.dumps(("ok", info), _no_ids)
        except Exception as e:
            yield protocol.dumps_error(e, _no_ids)
            return
        try:
            await self.closed.wait()  # held open: the client is connected while this lasts
        finally:
            self.closed.set()

    async def call(self, request: bytes, context: Any) -> AsyncIterator[bytes]:
        async for message in self._run(request, []):
            yield message

    async def call_chunked(self, request_iterator: AsyncIterator[bytes], context: Any) -> AsyncIterator[bytes]:
        stream, buffers = protocol.unframe([m async for m in request_iterator])
        async for message in self._run(stream, buffers):
            yield message

    async def _run(self, data: bytes, buffers: list[Any]) -> AsyncIterator[bytes]:
        loop = asyncio.get_running_loop()
        reply = await loop.run_in_executor(self.pool, self.ops.handle, data, buffers)
        for message in protocol.frames(reply):
            yield message


def _no_ids(x: Any) -> None:
    return None


def die_with_parent() -> None:
    """SIGKILL this process when the process that started it dies (Linux; elsewhere a no-op)."""
    import ctypes
    import signal

    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass


async def serve(gcs_address: str) -> None:
    """Serves one client until its Connect stream ends or SIGTERM, then ends the driver's job."""
    server_impl = SessionServer(gcs_address)
    interceptors: list[grpc.aio.ServerInterceptor] = []
    src = auth.require_token()
    if src.token is not None:
        interceptors.append(auth.ServerInterceptor(src.token))
    server = grpc.aio.server(options=rpc.server_options(control=False), interceptors=interceptors or None)
    server.add_generic_rpc_handlers((protocol.handler(server_impl),))
    port = server.add_insecure_port("127.0.0.1:0")  # loopback: only the proxy on this host
    await server.start()
    print(port, flush=True)
    os.dup2(2, 1)  # later output (the driver's forwarded worker logs) goes to the proxy's stderr
    rpc.install_signal_stop(asyncio.get_running_loop(), server_impl.closed)
    await server_impl.closed.wait()
    await server.stop(grace=1)
    await asyncio.get_running_loop().run_in_executor(None, server_impl.ops.shutdown)
    server_impl.pool.shutdown(wait=False, cancel_futures=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="One remote client's driver (started by the client proxy)")
    parser.add_argument("--gcs-address", required=True)
    args = parser.parse_args(argv)
    die_with_parent()
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    asyncio.run(serve(args.gcs_address))


if __name__ == "__main__":
    main()
