"""`python -m ember_serve_proxy` / `ember-serve-proxy`: the Serve HTTP proxy as a service.

    ember-serve-proxy --gcs-address 127.0.0.1:6379 --host 0.0.0.0 --port 8000 [--port-file F]

It connects to the cluster as a client (a driver in namespace "serve"), binds its socket (port 0
means any; the bound port goes to --port-file), then serves until SIGTERM.
"""
from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Iterator


def main(argv: list[str] | None = None) -> int:
    from ember_common import service

    p = argparse.ArgumentParser(prog="ember-serve-proxy", description="Ember Serve HTTP proxy")
    p.add_argument("--gcs-address", default=os.environ.get("EMBER_ADDRESS"),
                   help="host:port of the GCS (default: $EMBER_ADDRESS)")
    p.add_argument("--host", default="0.0.0.0")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--connect-timeout-s", type=float, default=120.0,
                   help="how long to keep trying to reach the cluster at start-up")
    service.add_common_flags(p)
    ns = p.parse_args(argv)
    if not ns.gcs_address:
        print("error: --gcs-address (or EMBER_ADDRESS) is required", file=sys.stderr)
        return 2
    service.setup(ns, "serve-proxy")
    sock = service.listen_http(ns.host, ns.port, backlog=2048)
    if sock is None:
        return 1
    import ember
    from ember_common import backoff

    def connect() -> None:
        try:
            ember.init(address=ns.gcs_address, namespace="serve", log_to_driver=False)
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

    from ember_common import metrics

    from .app import ProxyApp

    app = ProxyApp()
    if metrics.enabled():
        app.register_metrics()
        metrics.start_in_thread(ns.host)

    port = sock.getsockname()[1]
    if ns.port_file:
        tmp = ns.port_file + ".tmp"
        with open(tmp, "w") as f:
            f.write(str(port))
        os.replace(tmp, ns.port_file)
    config = uvicorn.Config(app, loop="uvloop", http="httptools", lifespan="on", log_level="warning",
                            access_log=False, timeout_graceful_shutdown=5, proxy_headers=False,
                            server_header=False, date_header=False)
    from ember.serve._private import proxies

    key = proxies.register(ns.host, port)
    try:
        _make_server(config).run(sockets=[sock])  # type: ignore[attr-defined]
    finally:
        try:
            proxies.unregister(key)
        except Exception as e:  # the GCS is gone already
            logging.getLogger("ember_serve_proxy").debug("unregister: %s", e)
        ember.shutdown()
        from ember_common import tracing

        tracing.shutdown()
    return 0


def _make_server(config: object) -> object:
    """uvicorn's Server, except that SIGTERM/SIGINT end it gracefully with exit code 0 (uvicorn
    re-raises the signal after its graceful shutdown, which would make the exit code -15)."""
    import contextlib
    import signal

    import uvicorn

    class Server(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            old = {s: signal.signal(s, lambda *_, s=s: self.handle_exit(s, None))
                   for s in (signal.SIGTERM, signal.SIGINT)}
            try:
                yield
            finally:
                for s, h in old.items():
                    signal.signal(s, h)

    return Server(config)  # type: ignore[arg-type]


if __name__ == "__main__":
    sys.exit(main())
