"""Application metrics: Counter, Gauge, Histogram (as `ray.util.metrics`).

    requests = Counter("app_requests", "Requests served", tag_keys=("route",))
    requests.set_default_tags({"route": "/"})
    requests.inc()                                 # app_requests_total{route="/"} 1.0

Where the values go: each process that records a metric (a driver, a task's worker, an actor)
serves them in the Prometheus text format from its own exporter, started on first record on the
node's address and a free port, and registered in the GCS internal KV (namespace `metrics`, key
`worker/<node_id>/<pid>`, value HOST:PORT) beside the services' endpoints (`raylet/<node_id>`,
...), so a scrape configuration can find them; the key is removed when the process exits. Each
process exports its own values (no node-wide aggregation step): scraping every endpoint gives
the cluster's values, told apart by Prometheus's `instance` label.
Tags are Prometheus labels. A Counter is exported as `<name>_total` (a Prometheus counter).

Rules (Ray's): a name is non-empty ("" is a ValueError); a name Prometheus refuses is warned
about and the metric discarded; tag_keys is a tuple of str; tag values are str; every tag key
needs a value (default tags or the call's) when a value is recorded; Counter.inc takes a value
> 0; Histogram needs positive boundaries. A tag key not among tag_keys is a ValueError.
"""
from __future__ import annotations

import atexit
import os
import re
import threading
import warnings
from typing import Any

_VALID_NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
KV_NAMESPACE = "metrics"


class _Exporter:
    """This process's registry and HTTP endpoint; registered in the GCS KV once connected."""

    def __init__(self) -> None:
        from prometheus_client import CollectorRegistry

        self.registry = CollectorRegistry(auto_describe=True)
        self.lock = threading.Lock()
        self.address = ""
        self.key = ""
        self.collectors: dict[str, tuple[str, tuple[str, ...], Any]] = {}

    def collector(self, kind: str, name: str, doc: str, labels: tuple[str, ...],
                  **kw: Any) -> Any:
        """The prometheus_client collector of this name (made once per process)."""
        import prometheus_client as pc

        with self.lock:
            known = self.collectors.get(name)
            if known is not None:
                if known[:2] != (kind, labels):
                    raise ValueError(f"metric {name!r} already exists in this process as a "
                                     f"{known[0]} with tag_keys {known[1]}")
                return known[2]
            cls = {"counter": pc.Counter, "gauge": pc.Gauge, "histogram": pc.Histogram}[kind]
            c = cls(name, doc or name, labels, registry=self.registry, **kw)
            self.collectors[name] = (kind, labels, c)
            return c

    def ensure_served(self) -> None:
        """Starts the endpoint (once) and registers it once the process is connected."""
        if self.key:
            return
        import ember

        with self.lock:
            if not self.address:
                from prometheus_client import start_http_server

                from ember.util import get_node_ip_address

                host = get_node_ip_address()
                server, _ = start_http_server(0, addr=host, registry=self.registry)
                self.address = f"{host}:{server.server_port}"
            if self.key or not ember.is_initialized():
                return
            from ember._private.doors import internal_kv

            node = ember.get_runtime_context().get_node_id()
            key = f"worker/{node}/{os.getpid()}"
            internal_kv._internal_kv_put(key, self.address, namespace=KV_NAMESPACE)
            self.key = key
            atexit.register(self._unregister)

    def _unregister(self) -> None:
        try:
            from ember._private.doors import internal_kv

            internal_kv._internal_kv_del(self.key, namespace=KV_NAMESPACE)
        except Exception:  # the cluster may be gone first; a stale key only fails a scrape
            pass


_exporter: _Exporter | None = None
_exporter_lock = threading.Lock()


def _get_exporter() -> _Exporter:
    global _exporter
    with _exporter_lock:
        if _exporter is None:
            _exporter = _Exporter()
        return _exporter


def exporter_address() -> str:
    """HOST:PORT of this process's metrics endpoint ("" before the first record)."""
    return _exporter.address if _exporter is not None else ""


class Metric:
    """What Counter, Gauge and Histogram share: name, description, tag keys, default tags."""

    _kind = ""

    def __init__(self, name: str, description: str = "",
                 tag_keys: tuple[str, ...] | None = None) -> None:
        if not isinstance(name, str) or not name:
            raise ValueError("Empty name is not allowed. Please provide a metric name.")
        self._discard_metric = not _VALID_NAME.match(name)
        if self._discard_metric:
            warnings.warn(f"Invalid metric name: {name}. The metric is discarded: names hold "
                          "letters, digits, _ and : and do not start with a digit.",
                          UserWarning, stacklevel=3)
        self._name = name
        self._description = description
        self._default_tags: dict[str, str] = {}
        self._tag_keys: tuple[str, ...] = tag_keys or ()
        if not isinstance(self._tag_keys, tuple):
            raise TypeError(f"tag_keys should be a tuple type, got: {type(self._tag_keys)}")
        for key in self._tag_keys:
            if not isinstance(key, str):
                raise TypeError(f"Tag keys must be str, got {type(key)}.")
        self._collector: Any = None

    def _make(self) -> Any:
        return _get_exporter().collector(self._kind, self._name, self._description,
                                         self._tag_keys)

    def set_default_tags(self, default_tags: dict[str, str]) -> Metric:
        """Tags used when a record call gives none for a key; returns the metric itself."""
        for key, val in default_tags.items():
            if key not in self._tag_keys:
                raise ValueError(f"Unrecognized tag key {key}.")
            if not isinstance(val, str):
                raise TypeError(f"Tag values must be str, got {type(val)}.")
        self._default_tags = dict(default_tags)
        return self

    def _final_tags(self, tags: dict[str, str] | None) -> dict[str, str]:
        if not tags:
            final = self._default_tags
        else:
            for key, val in tags.items():
                if key not in self._tag_keys:
                    raise ValueError(f"Unrecognized tag key {key}.")
                if not isinstance(val, str):
                    raise TypeError(f"Tag values must be str, got {type(val)}.")
            final = {**self._default_tags, **tags}
        missing = [k for k in self._tag_keys if k not in final]
        if missing:
            raise ValueError(f"Missing value for tag key(s): {','.join(missing)}.")
        return final

    def _series(self, tags: dict[str, str] | None) -> Any:
        """The collector's child for these tags (None if the metric is discarded)."""
        final = self._final_tags(tags)
        if self._discard_metric:
            return None
        if self._collector is None:
            self._collector = self._make()
        exporter = _get_exporter()
        if not exporter.key:
            exporter.ensure_served()
        return self._collector.labels(**final) if self._tag_keys else self._collector

    @property
    def info(self) -> dict[str, Any]:
        """name, description, tag_keys and default_tags."""
        return {"name": self._name, "description": self._description,
                "tag_keys": self._tag_keys, "default_tags": self._default_tags}

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self._name, self._description, self._tag_keys))


def _check_number(value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"value must be int or float, got {type(value)}.")


class Counter(Metric):
    """A value that only grows (a Prometheus counter, exported as `<name>_total`)."""

    _kind = "counter"

    def inc(self, value: int | float = 1.0, tags: dict[str, str] | None = None) -> None:
        """Adds value (> 0) to the series of these tags."""
        _check_number(value)
        if value <= 0:
            raise ValueError(f"value must be >0, got {value}")
        series = self._series(tags)
        if series is not None:
            series.inc(value)


class Gauge(Metric):
    """The last value set (a Prometheus gauge)."""

    _kind = "gauge"

    def set(self, value: int | float | None, tags: dict[str, str] | None = None) -> None:
        """Sets the series of these tags to value (None: nothing happens)."""
        if value is None:
            return
        _check_number(value)
        series = self._series(tags)
        if series is not None:
            series.set(value)


class Histogram(Metric):
    """Observations counted in buckets with the given upper boundaries (a Prometheus histogram)."""

    _kind = "histogram"

    def __init__(self, name: str, description: str = "", boundaries: list[float] | None = None,
                 tag_keys: tuple[str, ...] | None = None) -> None:
        super().__init__(name, description, tag_keys)
        if not boundaries:
            raise ValueError("boundaries argument should be provided when using the Histogram "
                             "class, e.g. Histogram(\"name\", boundaries=[1.0, 2.0])")
        for i, b in enumerate(boundaries):
            if b <= 0:
                raise ValueError(f"Invalid `boundaries` argument at index {i}, {boundaries}. "
                                 "Use positive values for the arguments.")
        self.boundaries = list(boundaries)

    def _make(self) -> Any:
        return _get_exporter().collector(self._kind, self._name, self._description,
                                         self._tag_keys, buckets=sorted(self.boundaries))

    def observe(self, value: int | float, tags: dict[str, str] | None = None) -> None:
        """Counts value in its bucket of the series of these tags."""
        _check_number(value)
        series = self._series(tags)
        if series is not None:
            series.observe(value)

    @property
    def info(self) -> dict[str, Any]:
        """Metric.info plus the boundaries."""
        return {**super().info, "boundaries": self.boundaries}

    def __reduce__(self) -> tuple[Any, ...]:
        return (Histogram, (self._name, self._description, self.boundaries, self._tag_keys))


__all__ = ["Counter", "Gauge", "Histogram", "Metric"]
