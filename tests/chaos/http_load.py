"""Steady HTTP load through serve-proxy's published port, from the host, in a thread.

One request every `period_s` to `/chaos?x=N`; a request that fails (connection refused or reset,
timeout, a non-200 status) is retried once after `retry_after_s`, as the issue's client does.
A 200 whose body is not the right answer is a violation, whatever the retry. Availability is the
share of requests answered 200 within the two tries; `samples` keeps each request's start (wall
time) and outcome, to tell availability while one kind of fault was on. Bounded: it stops at `stop()` or after
`max_requests`.
"""
from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from typing import Any


class HttpLoad:
    def __init__(self, port: int, period_s: float = 0.1, timeout_s: float = 5.0,
                 retry_after_s: float = 1.0, max_requests: int = 20_000) -> None:
        self.base = f"http://127.0.0.1:{port}/chaos"
        self.period_s = period_s
        self.timeout_s = timeout_s
        self.retry_after_s = retry_after_s
        self.max_requests = max_requests
        self.requests = 0
        self.first_try_ok = 0
        self.retried_ok = 0
        self.failed = 0
        self.failures: Counter[str] = Counter()  # reason of each failed try
        self.violations: list[str] = []
        self.max_latency_s = 0.0
        self.samples: list[tuple[float, bool]] = []  # (wall time it started, answered right)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="http-load", daemon=True)

    def start(self) -> HttpLoad:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(self.timeout_s * 2 + self.retry_after_s + 5)

    def _try(self, x: int) -> str | None:
        """None when answered right, else the reason."""
        t0 = time.monotonic()
        try:
            with urllib.request.urlopen(f"{self.base}?x={x}", timeout=self.timeout_s) as r:
                body = r.read()
        except urllib.error.HTTPError as e:
            return f"HTTP {e.code}"
        except (urllib.error.URLError, ConnectionError, TimeoutError, OSError) as e:
            reason = getattr(e, "reason", e)
            return f"{type(reason).__name__}"
        finally:
            self.max_latency_s = max(self.max_latency_s, time.monotonic() - t0)
        try:
            got = json.loads(body)
        except ValueError:
            self.violations.append(f"x={x}: 200 with a body that is not JSON: {body[:100]!r}")
            return "bad body"
        if got != {"y": 2 * x}:
            self.violations.append(f"x={x}: wrong answer {got!r}")
            return "wrong answer"
        return None

    def _run(self) -> None:
        x = 0
        while not self._stop.is_set() and self.requests < self.max_requests:
            t0 = time.monotonic()
            started = time.time()
            x += 1
            self.requests += 1
            reason = self._try(x)
            if reason is None:
                self.first_try_ok += 1
            else:
                self.failures[reason] += 1
                time.sleep(self.retry_after_s)
                reason = self._try(x)
                if reason is None:
                    self.retried_ok += 1
                else:
                    self.failures[reason] += 1
                    self.failed += 1
            self.samples.append((started, reason is None))
            self._stop.wait(max(0.0, self.period_s - (time.monotonic() - t0)))

    def figures(self) -> dict[str, Any]:
        ok = self.first_try_ok + self.retried_ok
        return {"requests": self.requests, "ok_first_try": self.first_try_ok,
                "ok_after_retry": self.retried_ok, "failed": self.failed,
                "availability": round(ok / self.requests, 4) if self.requests else None,
                "failed_tries_by_reason": dict(self.failures),
                "max_latency_s": round(self.max_latency_s, 2), "violations": self.violations}
