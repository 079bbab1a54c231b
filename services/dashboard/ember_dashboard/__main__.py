"""`python -m ember_dashboard` / `ember-dashboard`: the dashboard as a service.

    ember-dashboard --gcs-address 127.0.0.1:6379 [--host 127.0.0.1] [--port 8265] [--port-file F]
                    [--log-dir DIR] [--trace-dir DIR] [--die-with-parent]

It binds its socket first (port 0 = any; the bound port goes to --port-file), connects to the
cluster as a driver (namespace `_ember_dashboard`, retrying for --connect-timeout-s: under
compose it may start before the GCS), then serves until SIGTERM (exit code 0). Its flags are
`ember_common.settings.DashboardSettings` (a flag not given takes its EMBER_* variable when one
is set: EMBER_ADDRESS, EMBER_TRACE_DIR, EMBER_LOG_LEVEL).
"""
from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
from collections.abc import Iterator
from typing import Any


def main(argv: list[str] | None = None) -> int:
    """Runs the dashboard; 1 with a one-line reason when it cannot listen or reach the cluster."""
    from ember_common import envvars, service
    from ember_common.settings import DashboardSettings

    ns = DashboardSettings.from_argv_or_exit(argv, env_defaults=envvars.environ())
    if not ns.gcs_address:
        print("error: --gcs-address (or EMBER_ADDRESS) is required", file=sys.stderr)
        return 2
    service.setup(ns, "dashboard")
    sock = service.listen_http(ns.host, ns.port, backlog=128)
    if sock is None:
        return 1
    import ember
    from ember_common import backoff

    def connect() -> None:
        ember.init(address=ns.gcs_address, namespace="_ember_dashboard", log_to_driver=False)

    try:
        backoff.retry_sync(connect, backoff.Backoff(initial_s=0.25, max_s=1.0, deadline_s=ns.connect_timeout_s),
                           retry_on=lambda e: isinstance(e, (ConnectionError, OSError)))
    except (ConnectionError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    import uvicorn

    from .app import build_app

    app = build_app(session_name=os.path.basename(os.path.dirname(ns.log_dir or "")) or "ember",
                    trace_dir=ns.trace_dir)
    port = sock.getsockname()[1]
    if ns.port_file:
        tmp = ns.port_file + ".tmp"
        with open(tmp, "w") as f:
            f.write(str(port))
        os.replace(tmp, ns.port_file)
    logging.getLogger("ember_dashboard").info("dashboard at http://%s:%d", ns.host, port)
    config = uvicorn.Config(app, lifespan="off", log_level="warning", access_log=False,
                            timeout_graceful_shutdown=3, server_header=False)
    try:
        _server(config).run(sockets=[sock])
    finally:
        ember.shutdown()
    return 0


def _server(config: Any) -> Any:
    """uvicorn's Server, except that SIGTERM/SIGINT end it gracefully with exit code 0."""
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

    return Server(config)


if __name__ == "__main__":
    sys.exit(main())
