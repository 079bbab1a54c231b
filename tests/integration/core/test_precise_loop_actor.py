"""An async actor's event loop is the precise one (ember/_private/execution/precise_loop.py, made by
executor._become_actor): its sleeps wake when due, not rounded up to epoll's milliseconds. The
earliest of 40 wake-ups is the statistic (load only ever delays a wake-up)."""
from __future__ import annotations

import asyncio
import time

import ember

_WAIT_S = 0.0014  # epoll would round this wait up to 2 ms


@ember.remote
class Sleeper:
    async def earliest(self, n: int) -> tuple[str, float]:
        """(the loop's selector class, the least time a _WAIT_S sleep took over n sleeps)."""
        best = 1.0
        for _ in range(n):
            t0 = time.perf_counter()
            await asyncio.sleep(_WAIT_S)
            best = min(best, time.perf_counter() - t0)
        return type(asyncio.get_running_loop()._selector).__name__, best  # type: ignore[attr-defined]


def test_async_actor_sleeps_wake_on_time(ray_start):
    name, best = ember.get(Sleeper.remote().earliest.remote(40), timeout=60)
    assert name == "PreciseEpollSelector"
    assert _WAIT_S <= best < 0.0019, f"earliest wake-up {best * 1e3:.2f} ms for a {_WAIT_S * 1e3} ms sleep"
