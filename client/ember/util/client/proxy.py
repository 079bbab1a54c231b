"""The client proxy (Ray's client server): one port on the head for drivers that cannot reach
the nodes.

    client ──Connect/Call──▶ proxy :10001 ──(loopback)──▶ session process (a real driver) ──▶ cluster

Each client's Connect starts a session process of its own (`session.py`) and lasts as long as
the client is connected; its end (the client disconnects, exits or drops off the network) stops
that process, which ends its job. Calls carry the client's id in `ember-client-id` and are
forwarded chunk by chunk to that client's session without being parsed. The proxy checks the
cluster token like every Ember port (and the session checks it again).

    python -m ember.util.client.proxy --gcs-address HOST:PORT [--host H] [--port 10001] [--port-file F]
        [--die-with-parent]
"""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import sys
from dataclasses import dataclass
from typing import Any, AsyncIterator

import grpc

from ember_common import auth, envvars, rpc

from . import protocol
from .session import die_with_parent

log = logging.getLogger(__name__)


@dataclass
class Session:
    proc: asyncio.subprocess.Process
    channel: grpc.aio.Channel


class Proxy:
    """The sessions by client id, and the two forwarding methods."""

    def __init__(self, gcs_address: str) -> None:
        self.gcs_address = gcs_address
        self.sessions: dict[str, Session] = {}
        self.start_timeout_s = float(envvars.value("EMBER_CLIENT_PROXY_SESSION_START_TIMEOUT_S"))

    @staticmethod
    def _client_id(context: Any) -> str:
        for key, value in context.invocation_metadata() or ():
            if key == protocol.CLIENT_ID_HEADER:
                return str(value)
        return ""

    async def _start_session(self) -> Session:
        env = {**os.environ, **auth.service_env()}
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "ember.util.client.session", "--gcs-address", self.gcs_address,
            stdout=asyncio.subprocess.PIPE, env=env)
        assert proc.stdout is not None
        try:
            line = await asyncio.wait_for(proc.stdout.readline(), self.start_timeout_s)
            port = int(line)
        except (asyncio.TimeoutError, ValueError):
            await _stop(proc)
            raise RuntimeError("the client's session process did not start (see the proxy's log)") from None
        return Session(proc, rpc.aio_channel(f"127.0.0.1:{port}"))

    async def connect(self, request: bytes, context: Any) -> AsyncIterator[bytes]:
        cid = self._client_id(context)
        if not cid or cid in self.sessions:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                                f"Connect needs a new {protocol.CLIENT_ID_HEADER} header")
        try:
            session = await self._start_session()
        except RuntimeError as e:
            await context.abort(grpc.StatusCode.UNAVAILABLE, str(e))
        self.sessions[cid] = session
        log.info("client %s connected from %s (session pid %d)", cid, context.peer(), session.proc.pid)
        try:
            forward: Any = session.channel.unary_stream(protocol.CONNECT)
            async for msg in forward(request):
                yield msg
        finally:
            self.sessions.pop(cid, None)
            await session.channel.close()
            await _stop(session.proc)
            log.info("client %s disconnected", cid)

    async def _session(self, context: Any) -> Session:
        session = self.sessions.get(self._client_id(context))
        if session is None:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION,
                                "no session for this client: Connect first (or it has ended)")
        assert session is not None
        return session

    async def call(self, request: bytes, context: Any) -> AsyncIterator[bytes]:
        forward: Any = (await self._session(context)).channel.unary_stream(protocol.CALL)
        async for msg in forward(request):
            yield msg

    async def call_chunked(self, request_iterator: AsyncIterator[bytes], context: Any) -> AsyncIterator[bytes]:
        forward: Any = (await self._session(context)).channel.stream_stream(protocol.CALL_CHUNKED)
        async for msg in forward(request_iterator):
            yield msg

    async def close(self) -> None:
        for session in list(self.sessions.values()):
            await _stop(session.proc)


async def _stop(proc: asyncio.subprocess.Process) -> None:
    """SIGTERM (the session ends its job), SIGKILL after 10 s."""
    if proc.returncode is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        proc.terminate()
    try:
        await asyncio.wait_for(proc.wait(), 10)
    except asyncio.TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await proc.wait()


async def serve(gcs_address: str, host: str, port: int, port_file: str | None) -> None:
    """Serves until SIGTERM/SIGINT."""
    proxy = Proxy(gcs_address)
    # The kit's server: the token check, TLS, tracing and metrics as on every Ember port; the
    # wire's raw-bytes methods pass its request checks untouched.
    server, bound, _ = rpc.build_server(
        [lambda s: s.add_generic_rpc_handlers((protocol.handler(proxy),))], host, port, control=False)
    await server.start()
    rpc.write_port_file(port_file, bound)
    log.info("Ember client proxy on %s for the cluster at %s", rpc.host_port(host or "0.0.0.0", bound),
             gcs_address)
    stop = asyncio.Event()
    rpc.install_signal_stop(asyncio.get_running_loop(), stop)
    await stop.wait()
    await proxy.close()
    await server.stop(grace=2)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Ember's client proxy (ray:// and ember:// drivers)")
    parser.add_argument("--gcs-address", required=True, help="the cluster's GCS, HOST:PORT")
    parser.add_argument("--host", default="", help="the interface to listen on (default: the node's IP)")
    parser.add_argument("--port", type=int, default=protocol.DEFAULT_PORT)
    parser.add_argument("--port-file", default=None, help="write the bound port here")
    parser.add_argument("--die-with-parent", action="store_true", help="exit when the starting process does")
    args = parser.parse_args(argv)
    if args.die_with_parent:
        die_with_parent()
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    asyncio.run(serve(args.gcs_address, args.host, args.port, args.port_file))


if __name__ == "__main__":
    main()
