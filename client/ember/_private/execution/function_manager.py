"""The function table: remote functions are pickled once by the driver into the GCS KV and
loaded (and cached) by workers on first use. Keys are content hashes, so a redefined function
gets a new entry and an unchanged one is exported once. A pickle over 1 MiB is stored in parts
(ember_common.kv_parts: each put stays under the GCS's message limit and etcd's); one over
MAX_FUNCTION_BYTES (Ray's FUNCTION_SIZE_ERROR_THRESHOLD) is refused with an error naming it."""
from __future__ import annotations

import hashlib
import json
import sys
import threading
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Protocol, TypeVar

from ember_common import kv_parts, tracing

from ..objects.serialization import dumps_function

if TYPE_CHECKING:
    from ember_common.gcs_client import GcsClient

T = TypeVar("T")

NAMESPACE = "fun"
JOB_NAMESPACE = "job"


MAX_FUNCTION_BYTES = 10**8  # as Ray's FUNCTION_SIZE_ERROR_THRESHOLD


def check_size(what: str, size: int) -> None:
    """ValueError when a pickled function or class is over MAX_FUNCTION_BYTES: it names the
    size, the limit and the usual cause."""
    if size > MAX_FUNCTION_BYTES:
        raise ValueError(
            f"{what} is too large to ship: {size / 1e6:.1f} MB pickled, over the limit of "
            f"{MAX_FUNCTION_BYTES / 1e6:.0f} MB (Ray's FUNCTION_SIZE_ERROR_THRESHOLD). Check that "
            "its definition does not capture a large object (an array, a model) from its scope; "
            "put it in the object store with ember.put() and pass the ObjectRef instead.")


class FunctionsCore(Protocol):
    """What the function manager needs of the core worker (CoreWorker, in core_worker.py)."""

    gcs: GcsClient
    job_id: bytes

    def gcs_call(self, factory: Callable[[], Awaitable[T]]) -> T: ...


class FunctionManager:
    """Exports functions and classes to the GCS function table and loads them in workers."""

    def __init__(self, core: FunctionsCore) -> None:
        self.core = core
        self._exported: dict[int, str] = {}  # id(fn object) -> function_id
        self._keepalive: dict[int, Any] = {}
        self._loaded: dict[str, Any] = {}
        self._jobs_loaded: set[bytes] = set()
        self._job_namespaces: dict[bytes, str] = {}
        self._lock = threading.Lock()

    def export(self, fn: Any, what: str) -> str:
        """Pickles fn into the GCS function table once; returns its function id (ValueError when
        it is too big to ship, `check_size`)."""
        fid = self._exported.get(id(fn))
        if fid is not None:
            return fid
        try:
            blob = dumps_function(fn)
        except Exception as e:
            raise TypeError(f"cannot serialize {what}: {e}") from e
        check_size(what, len(blob))
        fid = hashlib.sha1(blob).hexdigest()
        md = tracing.metadata()
        for key, value in kv_parts.split(fid.encode(), blob):  # the whole (or its manifest) last
            self._put(key, value, md)
        with self._lock:
            self._exported[id(fn)] = fid
            self._keepalive[id(fn)] = fn
        return fid

    def export_job_paths(self, namespace: str) -> None:
        """Records the driver's import paths (script dir, cwd) so workers can import its modules,
        and the job's namespace (named actors created by its tasks live there)."""
        paths = [p for p in sys.path if p and "site-packages" not in p and "/lib/python" not in p]
        import os

        paths = [os.path.abspath(p) for p in paths] + [os.getcwd()]
        self.core.gcs_call(lambda: self.core.gcs.internal_kv_put(
            JOB_NAMESPACE, self.core.job_id.hex().encode(),
            json.dumps({"paths": paths, "namespace": namespace}).encode(), overwrite=True,
            timeout_s=30))

    def load(self, fid: str, job_id: bytes, name: str) -> Any:
        """Worker side: the function for fid, fetched from the GCS on first use."""
        fn = self._loaded.get(fid)
        if fn is not None:
            return fn
        self._load_job_paths(job_id)
        blob = self._get(fid.encode())
        if blob is None:
            raise RuntimeError(f"function {name} ({fid}) is missing from the function table")
        keys = kv_parts.parts_of(fid.encode(), blob)
        if keys is not None:
            blob = kv_parts.join(blob, [self._get(k) for k in keys])
        import pickle

        try:
            fn = pickle.loads(blob)
        except Exception as e:
            raise ImportError(f"cannot load function {name} on this worker: {type(e).__name__}: {e}. "
                              "Is its module importable on every node?") from e
        self._loaded[fid] = fn
        return fn

    def _put(self, key: bytes, value: bytes, md: Any) -> None:
        self.core.gcs_call(lambda: self.core.gcs.internal_kv_put(
            NAMESPACE, key, value, overwrite=False, timeout_s=30, metadata=md))

    def _get(self, key: bytes) -> bytes | None:
        return self.core.gcs_call(lambda: self.core.gcs.internal_kv_get(NAMESPACE, key, timeout_s=30))

    def _load_job_paths(self, job_id: bytes) -> None:
        if job_id in self._jobs_loaded:
            return
        self._jobs_loaded.add(job_id)
        blob = self.core.gcs_call(lambda: self.core.gcs.internal_kv_get(
            JOB_NAMESPACE, job_id.hex().encode(), timeout_s=30))
        if blob is not None:
            info = json.loads(blob)
            self._job_namespaces[job_id] = info.get("namespace", "")
            for p in info["paths"]:
                if p not in sys.path:
                    sys.path.append(p)

    def job_namespace(self, job_id: bytes) -> str:
        """Worker side: the namespace of the job a task belongs to."""
        self._load_job_paths(job_id)
        return self._job_namespaces.get(job_id, "")
