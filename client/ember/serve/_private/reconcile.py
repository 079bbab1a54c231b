"""The replica state machine of one deployment, as a pure function: the desired (version,
count) and the current replicas in, the replicas to start and to stop out.

Rolling update: replicas of the new version are started first (up to `surge` beyond the
target) and an old replica is only stopped once a new one is RUNNING, so serving capacity never
drops below the target. When the cluster cannot fit the surge (e.g. every GPU is taken), a new
replica that has been pending longer than `pending_grace_s` lets one old replica go first.
Stopping a replica means draining it: it leaves the routing table at once and is killed once
its ongoing requests have finished.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

STARTING, RUNNING, STOPPING = "STARTING", "RUNNING", "STOPPING"


@dataclass
class ReplicaView:
    """What the reconciler needs to know about one replica."""

    replica_id: str
    version: str
    state: str
    started_at: float = 0.0


@dataclass
class Decision:
    start: int = 0
    stop: list[str] = field(default_factory=list)


def surge_for(target: int) -> int:
    """Extra replicas a rolling update may start beyond the target (20%, at least 1)."""
    return max(1, math.ceil(0.2 * target))


def reconcile(version: str, target: int, replicas: list[ReplicaView], now: float,
              pending_grace_s: float = 10.0) -> Decision:
    """The replicas to start (of `version`) and to stop, to move towards `target` of `version`."""
    live = [r for r in replicas if r.state != STOPPING]
    new = [r for r in live if r.version == version]
    old = [r for r in live if r.version != version]
    new_running = [r for r in new if r.state == RUNNING]
    new_starting = [r for r in new if r.state == STARTING]
    d = Decision()
    # Too many of the new version: drop starting ones first, then the newest running ones.
    if len(new) > target:
        extra = len(new) - target
        order = sorted(new_starting, key=lambda r: -r.started_at) + sorted(new_running, key=lambda r: -r.started_at)
        d.stop.extend(r.replica_id for r in order[:extra])
        new_running = [r for r in new_running if r.replica_id not in d.stop]
        new = [r for r in new if r.replica_id not in d.stop]
    # Old replicas: keep only as many (the newest) as still needed to hold capacity at the target.
    old_running = sorted([r for r in old if r.state == RUNNING], key=lambda r: -r.started_at)  # newest first
    old_starting = [r for r in old if r.state == STARTING]
    d.stop.extend(r.replica_id for r in old_starting)
    keep_old = max(0, min(len(old_running), target - len(new_running)))
    stuck = any(now - r.started_at > pending_grace_s for r in new_starting)
    if stuck and keep_old > 0 and keep_old == len(old_running):
        keep_old -= 1  # the surge does not fit: let one old replica go to free its resources
    d.stop.extend(r.replica_id for r in old_running[keep_old:])
    missing = target - len(new)
    if missing > 0:
        cap = target + (surge_for(target) if keep_old and not stuck else 0)
        room = cap - len(new) - keep_old
        d.start = max(0, min(missing, room))
    return d
