"""The function table: remote functions are pickled once by the driver into the GCS KV and
loaded (and cached) by workers on first use. Keys are content hashes, so a redefined function
gets a new entry and an unchanged one is exported once."""
from __future__ import annotations

import hashlib
import json
import sys
import threading
from typing import TYPE_CHECKING, Any

from ember_common import tracing
from .serialization import dumps_function

if TYPE_CHECKING:
    from .core_worker import CoreWorker

NAMESPACE = "fun"
JOB_NAMESPACE = "job"


class FunctionManager:
    """Exports functions and classes to the GCS function table and loads them in workers."""

    def __init__(self, core: CoreWorker) -> None:
        self.core = core
        self._exported: dict[int, str] = {}  # id(fn object) -> function_id
        self._keepalive: dict[int, Any] = {}
        self._loaded: dict[str, Any] = {}
        self._jobs_loaded: set[bytes] = set()
        self._job_namespaces: dict[bytes, str] = {}
        self._lock = threading.Lock()

    def export(self, fn: Any, what: str) -> str:
        """Pickles fn into the GCS function table once; returns its function id."""
        fid = self._exported.get(id(fn))
        if fid is not None:
            return fid
        try:
            blob = dumps_function(fn)
        except Exception as e:
            raise TypeError(f"cannot serialize {what}: {e}") from e
        fid = hashlib.sha1(blob).hexdigest()
        md = tracing.metadata()
        self.core.gcs_call(lambda: self.core.gcs.internal_kv_put(
            NAMESPACE, fid.encode(), blob, overwrite=False, timeout_s=30, metadata=md))
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
        blob = self.core.gcs_call(lambda: self.core.gcs.internal_kv_get(
            NAMESPACE, fid.encode(), timeout_s=30))
        if blob is None:
            raise RuntimeError(f"function {name} ({fid}) is missing from the function table")
        import pickle

        try:
            fn = pickle.loads(blob)
        except Exception as e:
            raise ImportError(f"cannot load function {name} on this worker: {type(e).__name__}: {e}. "
                              "Is its module importable on every node?") from e
        self._loaded[fid] = fn
        return fn

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
