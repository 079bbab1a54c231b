"""`python -m ember_serve_proxy` / `ember-serve-proxy`: the Serve HTTP proxy as a service.

    ember-serve-proxy --gcs-address 127.0.0.1:6379 --host 0.0.0.0 --port 8000 [--port-file F]

Its flags are `ember_common.settings.ServeProxySettings` (a flag not given takes its EMBER_*
variable when one is set: EMBER_ADDRESS, EMBER_LOG_LEVEL, the EMBER_SERVE_* limits). The HTTP
limits (body, head, header-read timeout, keep-alive, connections) are docs/security.md's.

It connects to the cluster as a client (a driver in namespace "serve"), binds its socket (port 0
means any; the bound port goes to --port-file), then serves until SIGTERM. uvicorn serves on the
core worker's own loop (a uvloop loop, in the core's thread), so a request, the actor call it
makes and the reply that resumes it run on one thread; the main thread only waits and catches
the signals.
"""
from __future__ import annotations

import asyncio
import logging
import os
import socket
import sys
from collections.abc import Iterator
from typing import Any

# Its own namespace, so the job listings leave it out (Serve's actors and KV name "serve" explicitly).
PROXY_NAMESPACE = "_ember_serve_proxy"


def main(argv: list[str] | None = None) -> int:
    from ember_common import envvars, service
    from ember_common.settings import ServeProxySettings

    ns = ServeProxySettings.from_argv_or_exit(argv, env_defaults=envvars.environ())
    if not ns.gcs_address:
        print("error: --gcs-address (or EMBER_ADDRESS) is required", file=sys.stderr)
        return 2
    service.setup(ns, "serve-proxy")
    sock = service.listen_http(ns.host, ns.port, backlog=2048)
    if sock is None:
        return 1
    import uvloop

    # Before ember.init: the core worker's loop is then a uvloop loop, and uvicorn serves on it.
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    import ember
    from ember_common import backoff

    def connect() -> None:
        try:
            ember.init(address=ns.gcs_address, namespace=PROXY_NAMESPACE, log_to_driver=False)
        except (ConnectionError, OSError) as e:
            logging.getLogger("ember_serve_proxy").info("waiting for the cluster: %s", e)
            raise

    try:  # under compose the proxy may start before the GCS or any node
        backoff.retry_sync(connect, backoff.Backoff(initial_s=0.25, max_s=1.0,
                                                    deadline_s=ns.connect_timeout_s),
                           retry_on=lambda e: isinstance(e, (ConnectionError, OSError)))
    except (ConnectionError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    import uvicorn

    from ember._private.doors import driver
    from ember_common import metrics

    from .app import ProxyApp

    app = ProxyApp(max_inline_bytes=driver.max_inline_bytes(), max_body_bytes=ns.max_body_bytes)
    if metrics.enabled():
        app.register_metrics()
        metrics.start_in_thread(ns.host)

    port = sock.getsockname()[1]
    if ns.port_file:
        tmp = ns.port_file + ".tmp"
        with open(tmp, "w") as f:
            f.write(str(port))
        os.replace(tmp, ns.port_file)
    from .limits import limited_protocol

    protocol = limited_protocol(max_header_bytes=ns.max_header_bytes, max_header_fields=ns.max_header_fields,
                                header_timeout_s=ns.header_timeout_s, max_connections=ns.max_connections)
    config = uvicorn.Config(app, loop="none", http=protocol, lifespan="on", log_level="warning",
                            access_log=False, timeout_graceful_shutdown=5, proxy_headers=False,
                            server_header=False, date_header=False,
                            timeout_keep_alive=ns.keep_alive_timeout_s)  # type: ignore[arg-type]  # a float works
    from ember.serve import proxy_door

    key = proxy_door.register(ns.host, port)
    try:
        _serve_on(driver.event_loop(), _make_server(config), sock)
    finally:
        try:
            proxy_door.unregister(key)
        except Exception as e:  # the GCS is gone already
            logging.getLogger("ember_serve_proxy").debug("unregister: %s", e)
        ember.shutdown()
        from ember_common import tracing

        tracing.shutdown()
    return 0


def _serve_on(loop: asyncio.AbstractEventLoop, server: Any, sock: socket.socket) -> None:
    """Runs uvicorn's server on `loop` (the core worker's, in its thread) until it stops. The
    HTTP requests, the actor calls they make and the replies then share one thread: a request's
    call is submitted and its reply resumes the request with no thread hop and no hand-off of
    the interpreter lock. SIGTERM/SIGINT, which only
    this (main) thread can catch, ask the server to stop gracefully."""
    import concurrent.futures
    import signal

    old = {s: signal.signal(s, lambda *_, s=s: server.handle_exit(s, None)) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        done = asyncio.run_coroutine_threadsafe(server.serve(sockets=[sock]), loop)
        while True:
            try:
                done.result(timeout=1.0)
                return
            except concurrent.futures.TimeoutError:
                continue
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def _make_server(config: object) -> object:
    """uvicorn's Server, except that it installs no signal handlers (it runs on the core
    worker's thread; _serve_on catches SIGTERM/SIGINT on the main thread and ends it gracefully
    with exit code 0, where uvicorn would re-raise the signal and exit with -15)."""
    import contextlib

    import uvicorn

    class Server(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            yield

    return Server(config)  # type: ignore[arg-type]


if __name__ == "__main__":
    sys.exit(main())
