"""Typed client of the raylets (proto/raylet.proto): one method per RPC, addressed by raylet.

`RayletClient.request_worker_lease` is the one copy of "follow spillback": it asks the home
raylet, follows each redirect to the raylet named in it (spillback_count + 1, so that raylet
grants or queues but never redirects again), goes back home when a spilled-to raylet is
unreachable (its node died), and retries the home raylet under a backoff policy. The core
worker's task submitter and the GCS's actor creation both lease through it.

Every method raises the `ember_common.rpc` exception of the status the raylet answered
(Infeasible for a lease no node can run, InvalidArgument, Unavailable, ...), never a raw grpc
error.
"""
from __future__ import annotations

import asyncio
import dataclasses
from typing import Any, Awaitable, Callable, Collection, Sequence, TypeVar

import grpc

from . import backoff, rpc
from .proto import common_pb2, raylet_pb2, raylet_pb2_grpc
from .validate_rules import MAX_GROUPS_PER_REQUEST

# Failed lease requests to the home raylet: 20 tries over ~8 s, then the tasks fail.
LEASE_RETRY = backoff.Backoff(initial_s=0.05, multiplier=1.5, max_s=0.5, deadline_s=None,
                              max_attempts=20)

_R = TypeVar("_R")
_T = TypeVar("_T")


@dataclasses.dataclass(frozen=True)
class LeaseGrant:
    """A granted lease: the worker, and the raylet that granted it (return the worker there)."""

    grant: raylet_pb2.Grant
    raylet_address: str


class RayletClient:
    """Raylets by address, with `home` (this node's raylet) as the default. Channels come from
    channel_for (a cache the caller owns) or from a pool of this client's own."""

    def __init__(self, home: str = "", *,
                 channel_for: Callable[[str], grpc.aio.Channel] | None = None,
                 lease_retry: backoff.Backoff = LEASE_RETRY) -> None:
        self.home = home
        self.lease_retry = lease_retry
        self._pool: rpc.ChannelPool | None = None
        if channel_for is None:
            self._pool = rpc.ChannelPool()
            channel_for = self._pool.get
        self._channel_for = channel_for
        self._stubs: dict[str, raylet_pb2_grpc.RayletAsyncStub] = {}

    def _stub(self, address: str | None) -> raylet_pb2_grpc.RayletAsyncStub:
        addr = address or self.home
        stub = self._stubs.get(addr)
        if stub is None:
            stub = self._stubs[addr] = raylet_pb2_grpc.RayletStub(self._channel_for(addr))
        return stub

    async def close(self) -> None:
        """Closes the channels this client made itself (not those of channel_for)."""
        self._stubs.clear()
        if self._pool is not None:
            await self._pool.close()

    async def request_worker_lease(
            self, request: raylet_pb2.RequestWorkerLeaseRequest, *, address: str | None = None,
            retry: backoff.Backoff | None = None, keep_trying: Callable[[], bool] | None = None,
            on_hop: Callable[[str], None] | None = None,
            metadata: tuple[tuple[str, str], ...] | None = None) -> LeaseGrant | None:
        """Leases a worker, starting at address (default: home) and following spillback.

        Returns the grant, or None when the request was cancelled (CancelWorkerLease, or its
        owner died). on_hop(address) is called whenever the request moves to another raylet
        (so the caller can cancel it there). Raises Infeasible when no node can run it,
        InvalidArgument for a malformed request, and Unavailable once the start raylet stayed
        unreachable through the retry policy (or keep_trying() said stop). A request sent with
        spillback_count > 0 is pinned: the start raylet grants or queues it, never redirects
        (hard node affinity)."""
        home = address or self.home
        addr = home
        start = request.spillback_count
        policy = retry or self.lease_retry
        attempts = backoff.Attempts(policy)
        while True:
            try:
                reply = await self._stub(addr).RequestWorkerLease(request, metadata=metadata)
            except grpc.aio.AioRpcError as e:
                err = rpc.status_to_exception(e)
                if not rpc.is_transient(err) or (keep_trying is not None and not keep_trying()):
                    raise err from None
                delay = attempts.failed()
                if addr != home:  # that node is gone: ask home again (after a pause, as its
                    addr = home  # view of the cluster may still name the dead node)
                    request.spillback_count = start
                    if on_hop is not None:
                        on_hop(addr)
                    await asyncio.sleep(policy.max_s if delay is None else delay)
                    continue
                if delay is None:
                    raise err from None
                await asyncio.sleep(delay)
                continue
            which = reply.WhichOneof("result")
            if which == "spillback":
                addr = reply.spillback.raylet_address
                request.spillback_count += 1
                if on_hop is not None:
                    on_hop(addr)
                continue
            if which == "granted":
                return LeaseGrant(reply.granted, addr)
            return None  # cancelled

    async def return_worker(self, lease_id: bytes, disconnect: bool = False, *,
                            address: str | None = None, timeout_s: float = 10.0) -> None:
        """Gives a leased worker back (disconnect=True: it broke; the raylet replaces it)."""
        await self._unary(self._stub(address).ReturnWorker, raylet_pb2.ReturnWorkerRequest(
            lease_id=lease_id, disconnect=disconnect), timeout_s)

    async def cancel_worker_lease(self, lease_id: bytes, *, address: str | None = None,
                                  timeout_s: float = 10.0) -> bool:
        """Withdraws a queued lease request; True if it was still queued there."""
        reply = await self._unary(self._stub(address).CancelWorkerLease,
                                  raylet_pb2.CancelWorkerLeaseRequest(lease_id=lease_id), timeout_s)
        return bool(reply.cancelled)

    async def get_worker_failure_cause(self, lease_id: bytes, *, address: str | None = None,
                                       timeout_s: float = 5.0) -> raylet_pb2.WorkerFailureCause | None:
        """Why the worker of a lease died, when the raylet killed it (its memory monitor);
        None when the raylet knows nothing beyond the exit."""
        reply = await self._unary(self._stub(address).GetWorkerFailureCause,
                                  raylet_pb2.GetWorkerFailureCauseRequest(lease_id=lease_id), timeout_s)
        return reply.failure_cause if reply.HasField("failure_cause") else None

    async def notify_worker_blocked(self, worker_id: str, blocked: bool, *,
                                    address: str | None = None, timeout_s: float | None = None) -> None:
        """This worker is blocked in get()/wait() (its CPUs are lent out) or resumes."""
        await self._unary(self._stub(address).NotifyWorkerBlocked,
                          raylet_pb2.NotifyWorkerBlockedRequest(worker_id=worker_id, blocked=blocked),
                          timeout_s)

    async def register_worker(self, worker_id: str, pid: int, port: int, *,
                              address: str | None = None,
                              timeout_s: float = 30.0) -> raylet_pb2.RegisterWorkerReply:
        """A worker process announces its gRPC port; the reply describes its node."""
        return await self._unary(self._stub(address).RegisterWorker, raylet_pb2.RegisterWorkerRequest(
            worker_id=worker_id, pid=pid, port=port), timeout_s)

    async def get_node_stats(self, *, address: str | None = None,
                             timeout_s: float = 5.0) -> raylet_pb2.GetNodeStatsReply:
        """The node's resources, workers and queued lease requests."""
        return await self._unary(self._stub(address).GetNodeStats, raylet_pb2.GetNodeStatsRequest(),
                                 timeout_s)

    async def prepare_bundle_resources(self, groups: Sequence[tuple[bytes, Sequence[common_pb2.Bundle]]], *,
                                       commit_now: Collection[bytes] = (), address: str | None = None,
                                       timeout_s: float = 10.0) -> list[bool]:
        """Placement groups, phase one, for many groups (id, bundles) at once: reserves each
        group's bundles on that node (all or none), and commits at once those of the groups in
        commit_now (all their unplaced bundles are there); per group, False when they do not
        fit there now. Idempotent. Sent in calls of at most MAX_GROUPS_PER_REQUEST groups."""
        out: list[bool] = []
        for part in _calls(groups):
            reply = await self._unary(self._stub(address).PrepareBundleResources,
                                      raylet_pb2.PrepareBundleResourcesRequest(groups=[
                                          raylet_pb2.GroupBundles(placement_group_id=g, bundles=list(b),
                                                                  commit=g in commit_now)
                                          for g, b in part]), timeout_s)
            out += reply.success
        return out

    async def commit_bundle_resources(self, groups: Sequence[tuple[bytes, Sequence[int]]], *,
                                      address: str | None = None, timeout_s: float = 10.0) -> list[str]:
        """Phase two for many groups (id, bundle indexes): the prepared bundles become usable;
        per group '' or why not (a bundle not prepared there)."""
        out: list[str] = []
        for part in _calls(groups):
            reply = await self._unary(self._stub(address).CommitBundleResources,
                                      raylet_pb2.CommitBundleResourcesRequest(groups=[
                                          raylet_pb2.GroupBundleIndexes(placement_group_id=g, bundle_indexes=list(ix))
                                          for g, ix in part]), timeout_s)
            out += reply.errors
        return out

    async def cancel_resource_reserve(self, groups: Sequence[tuple[bytes, Sequence[int]]], *,
                                      address: str | None = None, timeout_s: float = 10.0) -> None:
        """Releases bundles of many groups (id, indexes: all of the group's there when empty) on
        that node; the workers leased from them are killed. Idempotent."""
        for part in _calls(groups):
            await self._unary(self._stub(address).CancelResourceReserve,
                              raylet_pb2.CancelResourceReserveRequest(groups=[
                                  raylet_pb2.GroupBundleIndexes(placement_group_id=g, bundle_indexes=list(ix))
                                  for g, ix in part]), timeout_s)

    async def shutdown(self, *, address: str | None = None, timeout_s: float = 5.0) -> None:
        """Stops the node (its workers, then the raylet)."""
        await self._unary(self._stub(address).Shutdown, raylet_pb2.ShutdownRequest(), timeout_s)

    @staticmethod
    async def _unary(method: Callable[..., Awaitable[_R]], request: Any, timeout_s: float | None) -> _R:
        try:
            return await method(request, timeout=timeout_s)
        except grpc.aio.AioRpcError as e:
            raise rpc.status_to_exception(e) from None


def _calls(groups: Sequence[_T]) -> list[Sequence[_T]]:
    """groups cut into the placement-group calls a raylet takes (MAX_GROUPS_PER_REQUEST each)."""
    n = MAX_GROUPS_PER_REQUEST
    return [groups[i:i + n] for i in range(0, len(groups), n)]
