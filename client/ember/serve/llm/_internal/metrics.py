"""LLM metrics of a replica, on its own Prometheus endpoint, and the per-request span.

With `LLMConfig.log_engine_metrics` (the default) each LLMServer replica serves the Prometheus
text format at `http://HOST:PORT/metrics` (HOST from `EMBER_SERVE_LLM_METRICS_HOST`, default
127.0.0.1; PORT from `EMBER_SERVE_LLM_METRICS_PORT`, default any free port; the address is
returned by `LLMServer.metrics_address()`):

    ember_serve_llm_time_to_first_token_seconds{model_id}     histogram
    ember_serve_llm_inter_token_latency_seconds{model_id}     histogram (per token)
    ember_serve_llm_request_seconds{model_id,outcome}         histogram (ok, error, aborted)
    ember_serve_llm_prompt_tokens_total{model_id}             counter
    ember_serve_llm_generation_tokens_total{model_id}         counter
    ember_serve_llm_tokens_per_second{model_id}               gauge, over the last 10 s
    ember_serve_llm_requests_running / _waiting{model_id}     gauges: the engine's batch and queue
    ember_serve_llm_kv_cache_usage{model_id}                  gauge, 0..1
    ember_serve_llm_preemptions_total{model_id}               gauge (since start)

Per token the replica only notes the token (a count and its inter-token latency in a list);
the series are updated once per event-loop iteration (`LLMMetrics.flush`, queued with
`call_soon` by the first token of the iteration): one counter increment, one window entry and
one increment per histogram bucket for all the tokens of an engine step, instead of three
locked increments per token and stream. A scrape sees a step's tokens once that step's
hand-off is over.

The span `llm.request` (attributes: model id, prompt and completion token counts, finish
reasons, outcome; never prompt or output text) is made when tracing is on (OTEL_* variables).
"""
from __future__ import annotations

import asyncio
import bisect
import collections
import time
from typing import Any, Protocol

from ember_common import envvars, metrics, tracing

_TTFT_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0)
_ITL_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.5)
_REQ_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
_WINDOW_S = 10.0


class _Observer(Protocol):
    """A histogram child (or _Noop)."""

    def observe(self, amount: float, /) -> None: ...


class _Incrementer(Protocol):
    """A counter child (or _Noop)."""

    def inc(self, amount: float = 1, /) -> None: ...


class _ByOutcome(Protocol):
    """The request histogram of one model, labelled by outcome (_Bound, or _Noop)."""

    def labels(self, outcome: str, /) -> _Observer: ...


class _Noop:
    def labels(self, *_: Any) -> _Noop:
        return self

    def observe(self, _: float) -> None:
        pass

    def inc(self, _: float = 1) -> None:
        pass


class _Tracker:
    """One request's timings."""

    __slots__ = ("m", "t0", "last", "n")

    def __init__(self, m: LLMMetrics, prompt_tokens: int) -> None:
        self.m = m
        self.t0 = self.last = time.monotonic()
        self.n = 0
        m.prompt_tokens.inc(prompt_tokens)

    def tokens(self, new: int) -> None:
        if new <= 0:
            return
        now = time.monotonic()
        m = self.m
        if self.n == 0:
            m.ttft.observe(now - self.t0)
        else:
            m.itl_pending.append((now - self.last) / new)
        self.n += new
        self.last = now
        m.new_tokens += new
        if not m.flush_queued:
            m.queue_flush()

    def finish(self, outcome: str) -> None:
        self.m.req.labels(outcome).observe(time.monotonic() - self.t0)


class LLMMetrics:
    def __init__(self, model_id: str, engine: Any, enabled: bool) -> None:
        self.model_id = model_id
        self.engine = engine
        self.window: collections.deque[tuple[float, int]] = collections.deque(maxlen=100_000)
        self.address = ""
        self.itl_pending: list[float] = []  # this loop iteration's inter-token latencies
        self.new_tokens = 0  # this loop iteration's tokens
        self.flush_queued = False
        noop = _Noop()
        self.ttft: _Observer = noop
        self.itl: _Observer = noop
        self.req: _ByOutcome = noop
        self.prompt_tokens: _Incrementer = noop
        self.gen_tokens: _Incrementer = noop
        if enabled:
            self._register()

    def _register(self) -> None:
        global _address
        if not metrics.enabled():
            metrics.configure(1, "serve-llm")  # this replica's registry; the port is chosen below
            host = envvars.value("EMBER_SERVE_LLM_METRICS_HOST")
            port = metrics.start_in_thread(host, envvars.value("EMBER_SERVE_LLM_METRICS_PORT"))
            _address = f"{host}:{port}"
        self.address = _address
        fam = _families()
        mid = self.model_id
        self.ttft = fam["ttft"].labels(mid)
        self.itl = fam["itl"].labels(mid)
        self.req = _Bound(fam["req"], mid)
        self.prompt_tokens = fam["prompt"].labels(mid)
        self.gen_tokens = fam["gen"].labels(mid)
        _instances[mid] = self

    def queue_flush(self) -> None:
        """Queues flush() after the current loop iteration (now, when no loop runs here)."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self.flush()
            return
        self.flush_queued = True
        loop.call_soon(self.flush)

    def flush(self) -> None:
        """Applies the tokens noted since the previous flush to the series (see the module
        docstring)."""
        self.flush_queued = False
        new, self.new_tokens = self.new_tokens, 0
        itl, self.itl_pending = self.itl_pending, []
        if new:
            self.gen_tokens.inc(new)
            self.window.append((time.monotonic(), new))
        if itl:
            observe_many(self.itl, itl)

    def tokens_per_s(self) -> float:
        cutoff = time.monotonic() - _WINDOW_S
        return sum(n for t, n in list(self.window) if t >= cutoff) / _WINDOW_S

    def start(self, prompt_tokens: int) -> _Tracker:
        return _Tracker(self, prompt_tokens)

    def span(self, rid: str) -> Any:
        if not tracing.enabled():
            return None
        return tracing.tracer().start_span("llm.request", attributes={"llm.model_id": self.model_id,
                                                                      "llm.request_id": rid})

    @staticmethod
    def end_span(span: Any, prompt_tokens: int, completion_tokens: int, reasons: list[str | None],
                 outcome: str) -> None:
        if span is None:
            return
        span.set_attribute("llm.prompt_tokens", prompt_tokens)
        span.set_attribute("llm.completion_tokens", completion_tokens)
        span.set_attribute("llm.finish_reasons", [r or "none" for r in reasons])
        span.set_attribute("llm.outcome", outcome)
        span.end()


_instances: dict[str, LLMMetrics] = {}
_fams: dict[str, Any] = {}
_address = ""


def _per_model(fn: Any) -> Any:
    return lambda: {(mid, ): float(fn(m)) for mid, m in list(_instances.items())}


def _families() -> dict[str, Any]:
    """The metric families of this process, made once."""
    if _fams:
        return _fams
    from prometheus_client import Counter, Histogram

    reg = metrics.registry()
    _fams["ttft"] = Histogram("ember_serve_llm_time_to_first_token_seconds", "time to first token",
                              ["model_id"], registry=reg, buckets=_TTFT_BUCKETS)
    _fams["itl"] = Histogram("ember_serve_llm_inter_token_latency_seconds", "time between tokens",
                             ["model_id"], registry=reg, buckets=_ITL_BUCKETS)
    _fams["req"] = Histogram("ember_serve_llm_request_seconds", "whole request", ["model_id", "outcome"],
                             registry=reg, buckets=_REQ_BUCKETS)
    _fams["prompt"] = Counter("ember_serve_llm_prompt_tokens", "prompt tokens", ["model_id"], registry=reg)
    _fams["gen"] = Counter("ember_serve_llm_generation_tokens", "generated tokens", ["model_id"], registry=reg)
    for name, doc, fn in (
            ("ember_serve_llm_requests_running", "sequences in the running batch", lambda m: m.engine.stats().running),
            ("ember_serve_llm_requests_waiting", "sequences waiting to join the batch",
             lambda m: m.engine.stats().waiting),
            ("ember_serve_llm_kv_cache_usage", "fraction of the KV cache in use",
             lambda m: m.engine.stats().kv_cache_usage),
            ("ember_serve_llm_preemptions_total", "sequences preempted for lack of KV cache",
             lambda m: m.engine.stats().num_preemptions),
            ("ember_serve_llm_tokens_per_second", "generated tokens per second, last 10 s",
             lambda m: m.tokens_per_s())):
        metrics.gauge(name, doc, _per_model(fn), ("model_id",))
    return _fams


def observe_many(hist: Any, values: list[float]) -> None:
    """hist.observe(v) for every v, with one increment per bucket hit and one of the sum (a
    prometheus_client Histogram child: each increment takes a lock); any other histogram
    gets observe per value."""
    if isinstance(hist, _Noop):
        return
    bounds = getattr(hist, "_upper_bounds", None)
    buckets = getattr(hist, "_buckets", None)
    total = getattr(hist, "_sum", None)
    if bounds is None or buckets is None or total is None or len(bounds) != len(buckets):
        for v in values:
            hist.observe(v)
        return
    counts = collections.Counter(bisect.bisect_left(bounds, v) for v in values)  # first bound >= v
    for i, c in counts.items():
        if i < len(buckets):  # (past every bound: none, the last bound is +Inf)
            buckets[i].inc(c)
    total.inc(sum(values))


class _Bound:
    def __init__(self, hist: Any, mid: str) -> None:
        self.hist, self.mid = hist, mid

    def labels(self, outcome: str) -> Any:
        return self.hist.labels(self.mid, outcome)
