"""Node resources: scalar amounts (CPU, memory, custom) plus GPUs as instances with fractions.

Pure logic, no I/O (`HeartbeatReport` builds the heartbeat's message). A request for num_gpus < 1 takes that fraction of one GPU (two 0.5 requests
share GPU 0); a whole-number request takes that many entirely free GPUs. Allocations return the
GPU ids so the worker can set CUDA_VISIBLE_DEVICES.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ember_common import resources as kit_resources
from ember_common.proto import gcs_pb2

EPS = 1e-9
GPU = kit_resources.GPU


def validate_request(request: dict[str, float]) -> None:
    """ValueError naming the resource unless every amount is a finite number >= 0 (and GPUs
    above 1 whole): the kit's one resource check (ember_common.resources)."""
    kit_resources.validate(request, source="the resource request")


@dataclass
class Allocation:
    resources: dict[str, float]
    gpu_ids: list[int] = field(default_factory=list)
    # Share of each GPU taken (same order as gpu_ids).
    gpu_shares: list[float] = field(default_factory=list)


class NodeResources:
    def __init__(self, total: dict[str, float]) -> None:
        validate_request(total)
        self.total = {k: float(v) for k, v in total.items() if v > 0}
        self.available = dict(self.total)
        self.gpus = [1.0] * int(self.total.get(GPU, 0))  # free fraction per GPU instance

    def fits_total(self, request: dict[str, float]) -> bool:
        """Could this node ever run the request (if it were idle)?"""
        return all(self.total.get(k, 0.0) + EPS >= v for k, v in request.items() if v > 0)

    def fits_now(self, request: dict[str, float]) -> bool:
        return self._pick_gpus(request.get(GPU, 0.0)) is not None and all(
            self.available.get(k, 0.0) + EPS >= v for k, v in request.items() if v > 0 and k != GPU)

    def _pick_gpus(self, amount: float) -> list[tuple[int, float]] | None:
        if amount <= EPS:
            return []
        if amount < 1 - EPS:
            # Pack fractions: the fullest GPU that still has room.
            best = None
            for i, free in enumerate(self.gpus):
                if free + EPS >= amount and (best is None or free < self.gpus[best]):
                    best = i
            return None if best is None else [(best, amount)]
        need = int(round(amount))
        whole = [i for i, free in enumerate(self.gpus) if free >= 1 - EPS]
        return [(i, 1.0) for i in whole[:need]] if len(whole) >= need else None

    def allocate(self, request: dict[str, float]) -> Allocation | None:
        """Takes the resources if they fit now; returns None otherwise."""
        if not self.fits_now(request):
            return None
        picks = self._pick_gpus(request.get(GPU, 0.0)) or []
        for i, share in picks:
            self.gpus[i] -= share
        for k, v in request.items():
            if v > 0:
                self.available[k] = self.available.get(k, 0.0) - v
        return Allocation(dict(request), [i for i, _ in picks], [s for _, s in picks])

    def release(self, alloc: Allocation) -> None:
        for i, share in zip(alloc.gpu_ids, alloc.gpu_shares, strict=True):
            self.gpus[i] = min(1.0, self.gpus[i] + share)
        for k, v in alloc.resources.items():
            if v > 0:
                self.available[k] = min(self.total.get(k, 0.0), self.available.get(k, 0.0) + v)

    def lend(self, resources: dict[str, float]) -> None:
        """A blocked worker's CPUs become available to others."""
        for k, v in resources.items():
            self.available[k] = self.available.get(k, 0.0) + v

    def can_reclaim(self, resources: dict[str, float]) -> bool:
        """Whether lent resources are free to be taken back now."""
        return all(self.available.get(k, 0.0) + EPS >= v for k, v in resources.items() if v > 0)

    def reclaim(self, resources: dict[str, float]) -> None:
        """Lent resources come back: the blocked worker resumes (only once `can_reclaim`: the
        lease queue makes it wait until then) or its lease ends while blocked."""
        for k, v in resources.items():
            self.available[k] = self.available.get(k, 0.0) - v

    def add_named(self, resources: dict[str, float]) -> None:
        """New resources on this node (a committed placement group bundle's named resources)."""
        for k, v in resources.items():
            self.total[k] = self.total.get(k, 0.0) + v
            self.available[k] = self.available.get(k, 0.0) + v

    def remove_named(self, resources: dict[str, float]) -> None:
        """Takes named resources away again (the bundle is released; its leases are gone)."""
        for k, v in resources.items():
            left = self.total.get(k, 0.0) - v
            if left <= EPS:
                self.total.pop(k, None)
                self.available.pop(k, None)
            else:
                self.total[k] = left
                self.available[k] = self.available.get(k, 0.0) - v

    def snapshot_available(self) -> dict[str, float]:
        return {k: round(max(v, 0.0), 6) for k, v in self.available.items()}

    def snapshot(self) -> tuple[dict[str, float], dict[str, float]]:
        """(available, total) for a reader on another thread (the heartbeat thread): each dict
        is copied in one `dict()` call, which no other thread interleaves with (the GIL, or
        the dict's own lock on a free-threaded build), then read from the copies."""
        available, total = dict(self.available), dict(self.total)
        return {k: round(max(v, 0.0), 6) for k, v in available.items()}, total


class HeartbeatReport:
    """What a raylet's heartbeats carry: the whole (available, total) maps first, then only the
    entries that changed since the heartbeat the GCS took last (`delta`), so a node holding
    many placement-group bundles (two named resources each: bundles.py) sends a few names a
    period, not all of them. The GCS answers `resend_full` to a delta it cannot apply (it holds
    another heartbeat, or none after a restart); a failed call, or a registration anew
    (`forget`), also makes the next heartbeat whole. Used from the heartbeat thread only."""

    def __init__(self, node_id: str) -> None:
        self.node_id = node_id
        self.seq = 0
        self._taken: tuple[int, dict[str, float], dict[str, float]] | None = None  # (seq, available, total)
        self._sent: tuple[int, dict[str, float], dict[str, float]] | None = None

    def build(self, available: dict[str, float], total: dict[str, float]) -> gcs_pb2.ReportHeartbeatRequest:
        """The next heartbeat for this snapshot (from `NodeResources.snapshot`)."""
        self.seq += 1
        self._sent = (self.seq, available, total)
        if self._taken is None:
            return gcs_pb2.ReportHeartbeatRequest(node_id=self.node_id, available_resources=available,
                                                  total_resources=total, seq=self.seq)
        base, old_available, old_total = self._taken
        return gcs_pb2.ReportHeartbeatRequest(
            node_id=self.node_id, delta=True, seq=self.seq, base_seq=base,
            available_resources=_changed(old_available, available), total_resources=_changed(old_total, total),
            removed_resources=[k for k in old_total.keys() | old_available.keys()
                               if k not in total and k not in available])

    def taken(self, reply: gcs_pb2.ReportHeartbeatReply) -> None:
        """The GCS answered the last heartbeat built."""
        self._taken = None if reply.resend_full else self._sent

    def forget(self) -> None:
        """The GCS may hold other maps (a failed call, a registration anew): send them whole."""
        self._taken = None


def _changed(old: dict[str, float], new: dict[str, float]) -> dict[str, float]:
    return {k: v for k, v in new.items() if old.get(k) != v}
