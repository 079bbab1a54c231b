"""An operator whose UDF is a callable class, run on an autoscaling pool of actors."""
from __future__ import annotations

import time
from typing import Any

import ember

from .autoscaling import AutoscalingPolicy, PoolView
from .operators import Call, RuntimeOp, streamed_block_fn
from .tasks import MapWorker


class _Actor:
    __slots__ = ("handle", "ready_ref", "ready", "busy", "idle_since")

    def __init__(self, handle: Any, ready_ref: Any) -> None:
        self.handle = handle
        self.ready_ref = ready_ref
        self.ready = False
        self.busy = 0
        self.idle_since = time.monotonic()


class ActorPoolMapOp(RuntimeOp):
    """Maps blocks on actors that each built the UDF's class once."""

    def __init__(self, name: str, steps: list[Any], remote_args: dict[str, Any], strategy: Any,
                 slots_per_actor: int, preserve_order: bool, ready_timeout_s: float,
                 target_max_block_size: int) -> None:
        super().__init__(name, 1)
        self.steps = steps
        self.remote_args = dict(remote_args)
        self.remote_args.setdefault("num_cpus", 1)
        self.slots = strategy.max_tasks_in_flight_per_actor or slots_per_actor
        self.policy = AutoscalingPolicy(strategy.min_size, strategy.max_size, self.slots,
                                        strategy.initial_size)
        self.preserve_order = preserve_order
        self.ready_timeout_s = ready_timeout_s
        self.target_max_block_size = target_max_block_size
        self.actors: list[_Actor] = []
        self._cls: Any = None
        self._res_checked = 0.0
        self._can_afford = True
        self._started_at = time.monotonic()

    # --- pool ------------------------------------------------------------------------------
    def _actor_class(self) -> Any:
        if self._cls is None:
            args = dict(self.remote_args)
            args.setdefault("max_restarts", 0)
            self._cls = ember.remote(**args)(MapWorker)
        return self._cls

    def _start_actor(self) -> None:
        h = self._actor_class().remote(self.steps, self.name, self.target_max_block_size)
        self.actors.append(_Actor(h, h.ready.remote()))

    def _stop_actor(self, a: _Actor) -> None:
        self.actors.remove(a)
        try:
            ember.kill(a.handle)
        except Exception:  # already gone
            pass

    def _afford(self) -> bool:
        now = time.monotonic()
        if now - self._res_checked > 1.0:
            self._res_checked = now
            avail = ember.available_resources()
            cpus = float(self.remote_args.get("num_cpus") or 0)
            gpus = float(self.remote_args.get("num_gpus") or 0)
            self._can_afford = avail.get("CPU", 0) >= cpus and avail.get("GPU", 0) >= gpus
        return self._can_afford

    def poll(self) -> None:
        pending = [a for a in self.actors if not a.ready]
        if pending:
            ready, _ = ember.wait([a.ready_ref for a in pending], num_returns=len(pending), timeout=0)
            ready_set = set(ready)
            for a in pending:
                if a.ready_ref in ready_set:
                    ember.get(a.ready_ref)  # raises the constructor's error
                    a.ready = True
                    a.idle_since = time.monotonic()
            if not any(a.ready for a in self.actors) and \
                    time.monotonic() - self._started_at > self.ready_timeout_s:
                raise TimeoutError(f"{self.name}: no actor of the pool became ready within "
                                   f"{self.ready_timeout_s:.0f}s (not enough resources for "
                                   f"{self.remote_args}?)")
        idle = [a for a in self.actors if a.ready and a.busy == 0]
        now = time.monotonic()
        view = PoolView(running=sum(a.ready for a in self.actors), pending=len(pending),
                        busy_slots=sum(a.busy for a in self.actors),
                        queued_inputs=len(self.inqueues[0]),
                        inputs_done=self.all_inputs_done(),
                        can_afford_actor=True if len(self.actors) < self.policy.initial_size
                        else self._afford(),
                        idle_actors=len(idle),
                        longest_idle_s=max((now - a.idle_since for a in idle), default=0.0))
        d = self.policy.decide(view)
        if d.delta > 0:
            for _ in range(d.delta):
                self._start_actor()
            self._res_checked = 0.0
        elif d.delta < 0:
            for a in idle[:-d.delta]:
                self._stop_actor(a)
        self.max_in_flight = max(1, sum(a.ready for a in self.actors) * self.slots)

    # --- work ------------------------------------------------------------------------------
    def _free_actor(self) -> _Actor | None:
        best = None
        for a in self.actors:
            if a.ready and a.busy < self.slots and (best is None or a.busy < best.busy):
                best = a
        return best

    def can_launch(self) -> bool:
        return bool(self.inqueues[0]) and self._free_actor() is not None

    def next_call(self) -> Call | None:
        a = self._free_actor()
        if a is None or not self.inqueues[0]:
            return None
        b = self.inqueues[0].popleft()
        ref, size, seq = b.ref, b.size_bytes, b.seq
        del b
        a.busy += 1
        idx = self._dispatched
        self._dispatched += 1

        def done(refs: list[Any], meta: Any) -> None:
            self.finish_index(idx, self.preserve_order)

        def fin() -> None:
            a.busy -= 1
            if a.busy == 0:
                a.idle_since = time.monotonic()

        c = Call(a.handle.run, (idx, None, ref), done, size, seq, on_finally=fin, index=idx)
        c.on_block = streamed_block_fn(self, self.preserve_order)
        return c

    def completed(self) -> bool:
        done = super().completed()
        if done and self.actors:
            self.shutdown()
        return done

    def shutdown(self) -> None:
        for a in list(self.actors):
            self._stop_actor(a)
