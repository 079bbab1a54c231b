"""The raylet's worker pool: which worker processes are starting, idle, leased or dead. Pure (no
processes, no sockets): events in, decisions out, an injected clock.

- Start: `to_start(waiting)` says how many processes to launch for waiting grants (at most
  `max_starting` at once) and to keep `num_prestart` alive; the driver launches them and calls
  `add_starting`. A worker that does not register within `startup_timeout_s` is killed.
- Reuse by shape: `take_idle(shape)` prefers the most recently idle worker that last ran the
  same resource shape (its imports and GPU set-up are warm), else any idle worker.
- Pooled per runtime env: every worker belongs to one env (its hash; "" for none), chosen when
  it starts (`add_starting(id, env)`); `take_idle(shape, env)` only hands out a worker of that
  env, and `to_start(waiting, env)` counts start-ups per env (prestarted workers have none).
- GPU and CPU workers apart (as Ray's pool keys workers by "is GPU"): a worker that ran a
  task needing GPUs is only leased again for GPU work, one that ran CPU-only work only for
  CPU-only work; a fresh worker goes to either. `idle_by_env()` counts idle workers under
  `kind_key(env, gpu)` once their kind is known, under `env` while fresh.
- Idle reaping: workers idle longer than `idle_timeout_s` beyond the `num_prestart` kept
  alive are killed (`tick`).
"""
from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Callable

from ember_common.rpc import NotFound

Clock = Callable[[], float]
Shape = tuple[tuple[str, float], ...]


def kind_key(env: str, gpu: bool) -> str:
    """The idle-count key of workers of runtime env `env` that ran GPU (or CPU-only) work."""
    return f"{env}|{'gpu' if gpu else 'cpu'}"


def needs_gpu(resources: dict[str, float] | Shape) -> bool:
    """Whether a request (resources or shape) asks for GPUs."""
    return dict(resources).get("GPU", 0.0) > 0


def shape_of(resources: dict[str, float]) -> Shape:
    """A hashable resource shape (positive amounts, sorted by name)."""
    return tuple(sorted((k, float(v)) for k, v in resources.items() if v > 0))


class WorkerState(enum.Enum):
    STARTING = "starting"
    IDLE = "idle"
    LEASED = "leased"
    DEAD = "dead"


@dataclass
class PoolWorker:
    worker_id: str
    state: WorkerState
    since_s: float  # clock time of the last state change
    port: int = 0
    shape: Shape = ()
    env: str = ""  # runtime env hash ("": none)
    gpu: bool | None = None  # ran GPU work (True) or CPU-only work (False); None: fresh


@dataclass(frozen=True)
class Kill:
    """Kill this worker process, for this reason."""

    worker_id: str
    reason: str


class WorkerPool:
    """Worker states and the start / reuse / reap decisions."""

    def __init__(self, *, num_prestart: int, max_starting: int, startup_timeout_s: float,
                 idle_timeout_s: float, clock: Clock) -> None:
        if max_starting < 1:
            raise ValueError(f"max_starting must be >= 1, got {max_starting}")
        self.num_prestart = num_prestart
        self.max_starting = max_starting
        self.startup_timeout_s = startup_timeout_s
        self.idle_timeout_s = idle_timeout_s
        self.clock = clock
        self.workers: dict[str, PoolWorker] = {}
        self._idle: list[str] = []  # most recently idle last

    def count(self, state: WorkerState, env: str | None = None) -> int:
        """Workers in that state (DEAD: told to die, not gone yet), of one env unless None."""
        return sum(1 for w in self.workers.values()
                   if w.state is state and (env is None or w.env == env))

    def idle_by_env(self) -> dict[str, int]:
        """Idle workers per runtime env hash (fresh ones) and per `kind_key` (used ones)."""
        out: dict[str, int] = {}
        for wid in self._idle:
            w = self.workers[wid]
            key = w.env if w.gpu is None else kind_key(w.env, w.gpu)
            out[key] = out.get(key, 0) + 1
        return out

    def alive(self) -> int:
        """Workers starting, idle or leased (not those told to die and not yet gone)."""
        return sum(1 for w in self.workers.values() if w.state is not WorkerState.DEAD)

    def to_start(self, waiting: int, env: str = "") -> int:
        """How many processes of runtime env `env` to launch now for `waiting` grants without a
        worker, within `max_starting` concurrent start-ups of that env, and (no env) to keep
        `num_prestart` alive."""
        starting = self.count(WorkerState.STARTING, env)
        for_waiting = min(waiting, self.max_starting) - starting
        for_prestart = self.num_prestart - self.alive() if env == "" else 0
        return max(0, for_waiting, for_prestart)

    def add_starting(self, worker_id: str, env: str = "") -> None:
        """The driver launched a process for this worker, in runtime env `env`."""
        self.workers[worker_id] = PoolWorker(worker_id, WorkerState.STARTING, self.clock(), env=env)

    def registered(self, worker_id: str, port: int) -> None:
        """The worker registered: it is idle. NotFound if this pool did not start it."""
        w = self.workers.get(worker_id)
        if w is None or w.state is not WorkerState.STARTING:
            raise NotFound(f"worker {worker_id} was not started by this raylet")
        w.port = port
        self._set_idle(w)

    def take_idle(self, shape: Shape, env: str = "") -> PoolWorker | None:
        """Leases an idle worker of runtime env `env` of the shape's kind (GPU or not), else a
        fresh one, preferring one that last ran `shape`; None if there is none (a worker of
        another env or kind is never handed out)."""
        gpu = needs_gpu(shape)
        mine = [wid for wid in self._idle if self.workers[wid].env == env
                and self.workers[wid].gpu == gpu]
        mine = mine or [wid for wid in self._idle if self.workers[wid].env == env
                        and self.workers[wid].gpu is None]
        if not mine:
            return None
        pick = next((wid for wid in reversed(mine) if self.workers[wid].shape == shape), mine[-1])
        self._idle.remove(pick)
        w = self.workers[pick]
        w.state, w.since_s, w.shape, w.gpu = WorkerState.LEASED, self.clock(), shape, gpu
        return w

    def returned(self, worker_id: str) -> None:
        """A leased worker came back healthy: idle again."""
        w = self.workers.get(worker_id)
        if w is not None and w.state is WorkerState.LEASED:
            self._set_idle(w)

    def exited(self, worker_id: str) -> PoolWorker | None:
        """The process is gone; returns what it was (None if unknown or already gone)."""
        w = self.workers.pop(worker_id, None)
        if w is None:
            return None
        if worker_id in self._idle:
            self._idle.remove(worker_id)
        prev = PoolWorker(w.worker_id, w.state, w.since_s, w.port, w.shape, w.env)
        w.state = WorkerState.DEAD
        return prev

    def tick(self) -> list[Kill]:
        """Start-up timeouts and idle workers to reap (the oldest idle first, keeping
        `num_prestart` alive). The driver kills them; their exits arrive through `exited`."""
        now = self.clock()
        out: list[Kill] = []
        for w in self.workers.values():
            if w.state is WorkerState.STARTING and now - w.since_s > self.startup_timeout_s:
                w.state = WorkerState.DEAD
                out.append(Kill(w.worker_id, f"did not register within {self.startup_timeout_s:g}s"))
        spare = self.alive() - self.num_prestart
        for wid in list(self._idle):  # oldest idle first
            if spare <= 0:
                break
            w = self.workers[wid]
            if now - w.since_s > self.idle_timeout_s:
                self._idle.remove(wid)
                w.state = WorkerState.DEAD  # no longer handed out; forgotten when it exits
                out.append(Kill(wid, f"idle for more than {self.idle_timeout_s:g}s"))
                spare -= 1
        return out

    def _set_idle(self, w: PoolWorker) -> None:
        w.state, w.since_s = WorkerState.IDLE, self.clock()
        if w.worker_id in self._idle:
            self._idle.remove(w.worker_id)
        self._idle.append(w.worker_id)
