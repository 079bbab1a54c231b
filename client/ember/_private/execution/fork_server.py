"""The worker template ("fork server") a raylet starts once per node for default-env workers.

Starting a worker as a fresh interpreter costs most of its start-up CPU (imports: grpc,
protobuf, ember) and private memory. The template pays that once: it imports what a worker needs,
freezes the garbage collector's view of those objects (`gc.freeze`, so collections in the
children never write to the shared pages), and then `fork()`s one child per worker the raylet
asks for. A child shares the template's pages copy-on-write and only runs `worker_main.main()`
(its gRPC server, its CoreWorker, registration).

gRPC is not fork-safe once it has started threads or opened channels, so the template never
creates a channel, a server, an event loop or a thread: it only imports. Everything with
threads or sockets is made in the child, after the fork.

Protocol, one line each way over the template's stdin/stdout (pipes to the raylet):

    raylet -> template   {"worker_id": "...", "out": "<path>", "err": "<path>"}
    template -> raylet   ready                      (once, after the imports)
                         started <worker_id> <pid>  (after each fork)
                         exit <pid> <code>          (a child ended: code as Popen.returncode)
                         error <worker_id> <reason> (a fork failed)

The template exits when its stdin closes (the raylet is gone); children die with it
(PR_SET_PDEATHSIG, set by worker_main in the child).
"""
from __future__ import annotations

import gc
import json
import os
import select
import signal
import sys

from .worker_main import die_with_parent, disable_core_dumps

# What a worker imports on its way to registering (not numpy: as Ray's, a worker loads it when
# a task needs it).
PRELOAD = (
    "grpc", "google.protobuf", "cloudpickle", "ember_common.rpc", "ember_common.proto.core_worker_pb2",
    "ember_common.proto.raylet_pb2", "ember_common.proto.gcs_pb2", "ember_common.tracing",
    "ember", "ember._private.execution.worker_main", "ember._private.core_worker", "ember._private.execution.executor",
    "ember._private.worker", "ember._private.transport.core_worker_server", "ember._private.objects.serialization",
    "ember._private.objects.plasma", "ember._private.execution.function_manager", "ember.exceptions", "asyncio",
    "concurrent.futures",
)


def preload(names: tuple[str, ...] = PRELOAD) -> list[str]:
    """Imports the modules (those not installed are skipped); returns the ones imported."""
    import importlib

    done = []
    for name in names:
        try:
            importlib.import_module(name)
            done.append(name)
        except ImportError:
            pass
    return done


def _say(line: str) -> None:
    os.write(1, (line + "\n").encode())


def _child(req: dict[str, str], wake_r: int, wake_w: int) -> None:
    """In the forked child: become a worker (never returns)."""
    code = 1
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        os.close(wake_r)
        os.close(wake_w)
        null = os.open(os.devnull, os.O_RDONLY)
        out = os.open(req["out"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        err = os.open(req["err"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        for fd, target in ((null, 0), (out, 1), (err, 2)):
            os.dup2(fd, target)
            os.close(fd)
        os.environ["EMBER_WORKER_ID"] = req["worker_id"]
        _reseed()
        # The frozen objects stay frozen: a collection would write their headers (copy-on-write).
        from . import worker_main

        worker_main.main()
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        os._exit(code)


def _reseed() -> None:
    """Fresh random state per child: `random` and ember's ids re-seed themselves at fork
    (os.register_at_fork); numpy's global generator does not, so it is seeded here if the
    template loaded it (numpy loads `numpy.random` lazily, on first use in the child)."""
    nprandom = sys.modules.get("numpy.random")
    if nprandom is not None:
        nprandom.seed()


def _reap() -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
        _say(f"exit {pid} {code}")


def serve() -> None:
    """Reads fork requests from stdin until it closes."""
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    os.set_blocking(wake_r, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    buf = b""
    while True:
        try:
            ready, _, _ = select.select([0, wake_r], [], [], 5.0)
        except InterruptedError:
            ready = []
        if wake_r in ready:
            try:
                os.read(wake_r, 512)
            except BlockingIOError:
                pass
        _reap()
        if 0 not in ready:
            continue
        chunk = os.read(0, 65536)
        if not chunk:
            return
        buf += chunk
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            if not line.strip():
                continue
            req = json.loads(line)
            try:
                pid = os.fork()
            except OSError as e:
                _say(f"error {req.get('worker_id', '?')} {e}")
                continue
            if pid == 0:
                _child(req, wake_r, wake_w)
            _say(f"started {req['worker_id']} {pid}")


def main() -> None:
    disable_core_dumps()  # every forked worker inherits it
    die_with_parent(watch=False)  # no thread: the template forks
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    preload()
    from ember_common import validate_rules

    validate_rules.precompile()  # the servers' request checks, shared with every child
    gc.collect()
    gc.freeze()  # everything imported so far is never touched by the collector again
    _say("ready")
    serve()
    sys.exit(0)


if __name__ == "__main__":
    main()
