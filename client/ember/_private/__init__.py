"""Ember's implementation modules. Nothing here is public API; see `ember/__init__.py`.

The rooms, one concept each (each package's `__init__` says what it holds):

- core_worker: CoreWorker, the runtime inside every driver and worker process;
  worker: the process-global state behind the public API (init/shutdown, get/put/wait);
  node: starting and stopping the service processes; log_printer: the driver's GCS channel;
- owner/: submitting tasks and actor calls, reference counts, the memory store, lineage;
- objects/: ObjectRef, serialization, the shared-memory client, put/get/wait, transfers;
- transport/: task streams, the direct TCP transport, the CoreWorker gRPC service;
- execution/: the worker side: the executor, function table, worker entry, fork server;
- telemetry/: task events;
- api/: remote functions, options, signatures, scheduling strategies, runtime context;
- doors/: internal KV, placement groups, state: what libraries and tools may import;
- runtime_env/: runtime environments, the client's side.

A module that holds the core worker names what it uses of it in a `typing.Protocol` of its own
(`SubmitterCore`, `ExecutorCore`, ...: beside it, or in its room's `ports`); only core_worker,
worker and execution.worker_main import `CoreWorker`, and no import circle remains, counting
function-level and `TYPE_CHECKING` imports (tests/unit/gates/test_core_imports.py).

Tools that use the public API (the CLI, job submission, the microbenchmark) live above the core,
in `ember._tools`.
"""
from __future__ import annotations

from typing import Any, Callable


def lazy_face(package: str, names: dict[str, str]) -> Callable[[str], Any]:
    """A room's module `__getattr__`: each of `names` (name -> the module defining it) loads
    from that module on first use, so importing the room imports none of its modules."""
    import importlib

    def __getattr__(name: str) -> Any:
        module = names.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(f"{package}.{module}"), name)

    return __getattr__
