"""The chaos suite's fault schedule and fault log: pure, no Docker, no clock of their own.

A `FaultSchedule` is a seeded, endless sequence of `FaultEvent`s (kind, target service, how long
the fault lasts, how long to wait before the next one). The same seed gives the same sequence,
so a failing run is replayed with `EMBER_CHAOS_SEED=<seed>`: the log names the seed on its first
line and every event after it. The runner (`docker_faults.FaultRunner`) carries the events out
one at a time and waits for the cluster to be healthy again before the next, so the *order* of
faults is reproducible; their wall-clock times are logged, not scheduled.

Kinds:
  kill       SIGKILL a service's container, keep it down `down_s`, start it again
  sigkill    SIGKILL one worker process (chosen by `pick`) inside a node's raylet container
  netcut     disconnect a node (its objmgr container owns the node's network namespace) from
             the cluster network for `down_s`, then connect it again with its aliases
  leader-kill       (HA cluster) SIGKILL whichever GCS replica leads now, found as clients find
                    it; start it again after `down_s`
  leader-partition  (HA cluster) disconnect the leader from etcd's network only, for `down_s`
                    (longer than the lease): it loses its lease while clients still reach it

`lead` names kinds that each come once, in a seeded order, before the weighted draws: a short
run still exercises them (the HA suite leads with both leader kinds).
"""
from __future__ import annotations

import json
import random
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from typing import IO, Any

KILL_TARGETS = ("raylet-head", "raylet-worker", "objmgr-worker", "gcs", "etcd", "serve-proxy")
SIGKILL_TARGETS = ("raylet-head", "raylet-worker")
NETCUT_TARGETS = ("objmgr-worker",)
LEADER_TARGETS = ("gcs-leader",)  # resolved when the fault is injected: whichever replica leads
TARGETS = {"kill": KILL_TARGETS, "sigkill": SIGKILL_TARGETS, "netcut": NETCUT_TARGETS,
           "leader-kill": LEADER_TARGETS, "leader-partition": LEADER_TARGETS}
LEADER_KINDS = ("leader-kill", "leader-partition")
# Relative weights of the kinds: worker kills are cheap and frequent in real clusters.
DEFAULT_WEIGHTS = {"kill": 3.0, "sigkill": 2.0, "netcut": 1.0, "leader-kill": 1.0,
                   "leader-partition": 1.0}


@dataclass(frozen=True)
class FaultEvent:
    """One fault: what, where, how long it lasts, how long to wait after recovery."""

    index: int
    kind: str
    target: str
    down_s: float
    gap_s: float
    pick: int  # for `sigkill`: index (mod count) into the sorted worker pids

    def describe(self) -> str:
        if self.kind == "sigkill":
            return f"#{self.index} sigkill a worker (pick {self.pick}) in {self.target}"
        return f"#{self.index} {self.kind} {self.target} for {self.down_s:.1f}s"


@dataclass
class FaultSchedule:
    """Seeded fault sequence. `kinds` maps a kind to its targets; empty target lists drop it."""

    seed: int
    kinds: dict[str, tuple[str, ...]] = field(default_factory=lambda: {
        "kill": KILL_TARGETS, "sigkill": SIGKILL_TARGETS, "netcut": NETCUT_TARGETS})
    lead: tuple[str, ...] = ()  # kinds that each come once first, in a seeded order
    weights: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_WEIGHTS))
    down_s: tuple[float, float] = (1.0, 4.0)
    # a cut longer than the GCS's node death timeout (10 s in the suite) makes the node die and
    # come back; a shorter one must go unnoticed
    netcut_down_s: tuple[float, float] = (2.0, 14.0)
    # a partition must outlast the leader's lease (4 s in the suite) for another replica to lead
    partition_down_s: tuple[float, float] = (6.0, 10.0)
    gap_s: tuple[float, float] = (2.0, 6.0)

    def __post_init__(self) -> None:
        unknown = set(self.kinds) - set(DEFAULT_WEIGHTS)
        if unknown:
            raise ValueError(f"unknown fault kinds {sorted(unknown)}; known: {sorted(DEFAULT_WEIGHTS)}")
        self.kinds = {k: tuple(v) for k, v in self.kinds.items() if v}
        if not self.kinds:
            raise ValueError("a fault schedule needs at least one kind with a target")
        missing = sorted(set(self.lead) - set(self.kinds))
        if missing:
            raise ValueError(f"lead kinds {missing} are not among the schedule's kinds {sorted(self.kinds)}")
        for name, (lo, hi) in (("down_s", self.down_s), ("netcut_down_s", self.netcut_down_s),
                               ("partition_down_s", self.partition_down_s), ("gap_s", self.gap_s)):
            if not 0 <= lo <= hi:
                raise ValueError(f"{name} must be (low, high) with 0 <= low <= high, got {(lo, hi)}")

    @classmethod
    def of_kinds(cls, seed: int, kinds: list[str], lead: tuple[str, ...] = ()) -> FaultSchedule:
        """The default targets of the named kinds only (ValueError naming an unknown kind)."""
        unknown = sorted(set(kinds) - set(TARGETS))
        if unknown:
            raise ValueError(f"unknown fault kinds {unknown}; known: {sorted(TARGETS)}")
        return cls(seed, kinds={k: TARGETS[k] for k in kinds}, lead=tuple(k for k in lead if k in kinds))

    def _down(self, kind: str) -> tuple[float, float]:
        return {"netcut": self.netcut_down_s, "leader-partition": self.partition_down_s}.get(kind, self.down_s)

    def events(self) -> Iterator[FaultEvent]:
        """The endless sequence; the caller stops taking events when its time is up."""
        rng = random.Random(self.seed)
        kinds = sorted(self.kinds)
        weights = [self.weights.get(k, 1.0) for k in kinds]
        first = sorted(set(self.lead))
        rng.shuffle(first)
        i = 0
        while True:
            kind = first[i] if i < len(first) else rng.choices(kinds, weights)[0]
            target = rng.choice(self.kinds[kind])
            down = round(rng.uniform(*self._down(kind)), 2)
            gap = round(rng.uniform(*self.gap_s), 2)
            pick = rng.randrange(1 << 16)
            yield FaultEvent(i, kind, target, down, gap, pick)
            i += 1

    def first(self, n: int) -> list[FaultEvent]:
        out = []
        for ev in self.events():
            if len(out) == n:
                break
            out.append(ev)
        return out


class FaultLog:
    """JSON lines: a header with the seed, then one line per fault step, flushed as written.

    `clock` is injected (wall time by default) so tests can pin the timestamps."""

    def __init__(self, stream: IO[str], seed: int, clock: Callable[[], float] = time.time) -> None:
        self.stream = stream
        self.clock = clock
        self.t0 = clock()
        self.records: list[dict[str, Any]] = []
        self.write({"event": "start", "seed": seed,
                    "replay": f"EMBER_CHAOS_SEED={seed} pytest -m chaos tests/chaos"})

    def write(self, record: dict[str, Any]) -> dict[str, Any]:
        now = self.clock()
        rec = {"t": round(now - self.t0, 3), "wall": round(now, 3), **record}
        self.records.append(rec)
        self.stream.write(json.dumps(rec, sort_keys=True) + "\n")
        self.stream.flush()
        return rec

    def fault(self, ev: FaultEvent, phase: str, **extra: Any) -> dict[str, Any]:
        return self.write({"event": "fault", "phase": phase, **asdict(ev), **extra})


def summarize(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Figures from a fault log: faults by kind and by kind:target, recovery seconds per kind
    (max and mean), and the faults whose recovery failed."""
    done = [r for r in records if r.get("event") == "fault" and r.get("phase") == "recovered"]
    failed = [r for r in records if r.get("event") == "fault" and r.get("phase") == "not_recovered"]
    by_kind: dict[str, int] = {}
    by_target: dict[str, int] = {}
    rec: dict[str, list[float]] = {}
    for r in done + failed:
        by_kind[r["kind"]] = by_kind.get(r["kind"], 0) + 1
        key = f"{r['kind']}:{r['target']}"
        by_target[key] = by_target.get(key, 0) + 1
    for r in done:
        rec.setdefault(f"{r['kind']}:{r['target']}", []).append(float(r["recovery_s"]))
    recovery = {k: {"n": len(v), "max_s": round(max(v), 2), "mean_s": round(sum(v) / len(v), 2)}
                for k, v in sorted(rec.items())}
    return {"faults_by_kind": by_kind, "faults_by_target": by_target, "recovery": recovery,
            "not_recovered": [f"#{r['index']} {r['kind']} {r['target']}: {r.get('error', '')}"
                              for r in failed]}


def availability_by_kind(records: list[dict[str, Any]],
                         samples: list[tuple[float, bool]]) -> dict[str, dict[str, Any]]:
    """HTTP availability while each kind of fault was on: the requests (wall time they started,
    answered right or not) that started between a fault's `inject` and its `recovered` (or
    `not_recovered`) record, grouped by the fault's kind."""
    windows: dict[int, list[Any]] = {}
    for r in records:
        if r.get("event") != "fault":
            continue
        if r["phase"] == "inject":
            windows[r["index"]] = [r["kind"], r["wall"], None]
        elif r["phase"] in ("recovered", "not_recovered") and r["index"] in windows:
            windows[r["index"]][2] = r["wall"]
    out: dict[str, dict[str, Any]] = {}
    for kind, start, end in windows.values():
        if end is None:
            continue
        fig = out.setdefault(kind, {"requests": 0, "failed": 0})
        hit = [ok for t, ok in samples if start <= t <= end]
        fig["requests"] += len(hit)
        fig["failed"] += hit.count(False)
    for fig in out.values():
        n = fig["requests"]
        fig["availability"] = round(1 - fig["failed"] / n, 4) if n else None
    return out
