"""Entry point of a worker process (started by its node's raylet).

Starts a CoreWorker (gRPC server on a background loop), registers with the raylet, then runs
pushed tasks on the main thread until told to exit or until the raylet goes away.
"""
from __future__ import annotations

import logging
import os
import sys
import threading
import time

from ember_common import envvars


def die_with_parent(watch: bool = True) -> None:
    """Exit when the raylet (our parent) dies, even if it was SIGKILLed: PR_SET_PDEATHSIG (Linux),
    and with watch=True also a thread that notices a new parent (a parent that died before the
    prctl call, a system without prctl). The fork server passes watch=False: a template that
    forks must have no threads; its children call this again (fork clears the death signal)."""
    try:
        import ctypes
        import signal

        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass
    if not watch:
        return
    parent = os.getppid()

    def watch_parent() -> None:
        while True:
            time.sleep(1.0)
            if os.getppid() != parent:
                os._exit(1)

    threading.Thread(target=watch_parent, daemon=True, name="ember-parent-watch").start()


def disable_core_dumps() -> None:
    """No core files from this worker (it holds the cluster token); a forked child inherits
    the limit."""
    import resource

    try:
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    except (OSError, ValueError):
        pass


def main() -> None:
    disable_core_dumps()
    die_with_parent()
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from ..api import logging_config

    job_logging = logging_config.from_environment()  # the job's ember.LoggingConfig
    if job_logging is not None:
        logging_config.configure(job_logging)
    from ember_common import rpc, tracing
    from ember_common.config import get_config

    from .. import worker as worker_mod
    from ..core_worker import CoreWorker, WorkerMode
    from ..telemetry import task_events
    from .executor import TaskExecutor

    tracing.setup("ember-worker")

    def on_term(*_: object) -> None:
        # The spans first: their exporter does not depend on the cluster, while the last task
        # events go to the GCS (up to a few seconds when it is slow or gone), and the raylet
        # SIGKILLs a worker 2 s after its SIGTERM.
        tracing.shutdown()
        task_events.stop()  # the last task events (a short try)
        os._exit(0)

    import signal

    signal.signal(signal.SIGTERM, on_term)
    raylet_address = envvars.require("EMBER_RAYLET_ADDRESS")
    worker_id = envvars.require("EMBER_WORKER_ID")
    core = CoreWorker(
        WorkerMode.WORKER, gcs_address=envvars.require("EMBER_GCS_ADDRESS"), raylet_address=raylet_address,
        objmgr_address=envvars.require("EMBER_OBJMGR_ADDRESS"), node_id=envvars.require("EMBER_NODE_ID"),
        store_dir=envvars.require("EMBER_STORE_DIR"), job_id=b"", session_dir=envvars.require("EMBER_SESSION_DIR"),
        config=get_config(), worker_id=worker_id)
    w = worker_mod.Worker(core, WorkerMode.WORKER, None)
    worker_mod.set_global_worker(w)
    core.executor = TaskExecutor(core, w.functions)
    try:
        core.run(lambda: core.raylet.register_worker(worker_id, os.getpid(), core.port,
                                                       timeout_s=30))
    except rpc.ServiceError as e:
        print(f"worker {worker_id}: cannot register with raylet {raylet_address}: {e}",
              file=sys.stderr)
        os._exit(1)
    try:
        core.executor.run_forever()
    except KeyboardInterrupt:
        pass
    tracing.shutdown()
    task_events.stop()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
