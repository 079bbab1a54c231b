"""Leader election among GCS replicas on one etcd (`--ha`), with a lease.

    FOLLOWER --(leader key absent; this replica created it)--> LEADER --(lease lost)--> DEPOSED
       ^ reads the key every poll: its value is the leader's address     (the process exits)

Every replica polls the leader key `/ember/<cluster>/__leader__`. While it exists its value is
the leader's address, which a follower gives its callers (gate.py). When it is gone (the
leader's lease ended: the leader was killed, paused or cut off from etcd past its TTL, or it
resigned on a graceful stop) a follower grants itself a lease of `ttl_s` and creates the key
attached to it in one transaction (create if absent): the replica whose transaction creates it
leads, the others go on polling. The key's create revision is the leader's fencing token:
`EtcdStorage.fence` guards every later write with it, so once the key is gone or another
replica's, a deposed leader's writes are refused by etcd itself.

The leader renews its lease every third of its TTL. It knows it holds the lease only until
`LeaseClock.valid_until`: the send time of the last renewal etcd answered plus the TTL etcd gave
(etcd counts from when it received the renewal, later, so the local bound ends first). Past it
the gate closes (`leading()` is false) but the leadership is not yet given up: a renewal that
was slow (a loaded host stalls the event loop, or etcd, for a second) may still have reached
etcd in time. The leader asks etcd for up to one more TTL (`_confirm`): a lease etcd still holds
means the key is still this replica's, so no other replica can lead, and it serves again from
the renewal's send time. When etcd answers that the lease is gone, or does not answer within
that grace, the leadership is lost; the process then exits (server.py) rather than unwind its
in-memory state, and a supervisor (compose, Kubernetes) restarts it as a follower. This is etcd's election recipe (concurrency.Election: a key per
candidate, the lowest create revision leads) reduced to one key, since only the leader's identity
matters here, not a queue of successors.
"""
from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Awaitable, Callable

from .etcd_storage import EtcdStorage
from .storage import StorageUnavailable

log = logging.getLogger(__name__)

LEADER_KEY = "__leader__"
POLL_S = 0.1  # how often a follower reads the leader key


@dataclass
class LeaseClock:
    """How long this replica knows it holds its lease (pure: times are passed in)."""

    valid_until: float = 0.0

    def renewed(self, sent_at: float, ttl_s: float) -> None:
        """etcd answered a grant or a renewal sent at sent_at with a TTL of ttl_s."""
        self.valid_until = max(self.valid_until, sent_at + ttl_s) if ttl_s > 0 else 0.0

    def holds(self, now: float) -> bool:
        """Whether the lease is surely still alive at etcd at time now."""
        return now < self.valid_until

    def next_renewal(self, now: float, ttl_s: float) -> float:
        """Seconds until the next renewal: a third of the TTL, sooner when little is left."""
        return max(0.0, min(ttl_s / 3, (self.valid_until - now) / 2))


class Leadership:
    """One replica's part in the election (see the module docstring). Use from one event loop."""

    def __init__(self, storage: EtcdStorage, address: str, ttl_s: int, poll_s: float = POLL_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if ttl_s < 1:
            raise ValueError(f"the leader lease TTL must be at least 1 s, got {ttl_s}")
        self.storage = storage
        self.address = address
        self.ttl_s = ttl_s
        self.poll_s = poll_s
        self.key = storage.root_key(LEADER_KEY)
        self.leader_address = ""  # the leader as last read ("" while there is none)
        self.lease_id = 0
        self.revision = 0  # the leader key's create revision once this replica leads
        self.lease = LeaseClock()
        self.lost = asyncio.Event()
        self.why_lost = ""
        self._clock = clock
        self._granted_ttl = float(ttl_s)
        # told False when the gate closes past the local bound, True when etcd confirms the
        # lease again (server.py: the health service's ember.Gcs says what the gate does)
        self.on_serving: Callable[[bool], Awaitable[None]] | None = None

    def leading(self) -> bool:
        """This replica leads and surely still holds its lease."""
        return self.revision > 0 and not self.lost.is_set() and self.lease.holds(self._clock())

    def lose(self, why: str) -> None:
        """Records that the leadership is gone (the lease, or a fenced write refused)."""
        if not self.lost.is_set():
            self.why_lost = why
            log.error("GCS replica %s lost the leadership: %s", self.address, why)
            self.lost.set()

    async def campaign(self, stop: asyncio.Event) -> bool:
        """Waits until this replica leads (True, with the storage fenced) or stop is set (False)."""
        warned = False
        while not stop.is_set():
            try:
                if await self._try_once():
                    return True
                warned = False
            except StorageUnavailable as e:  # etcd away: keep polling; say so once per outage
                if not warned:
                    log.warning("GCS replica %s cannot reach etcd to follow the election: %s", self.address, e)
                    warned = True
            try:
                await asyncio.wait_for(stop.wait(), self.poll_s)
            except asyncio.TimeoutError:
                pass
        return False

    async def _try_once(self) -> bool:
        held = await self.storage.get_raw(self.key)
        if held is not None:
            self.leader_address = held.decode(errors="replace")
            return False
        sent = self._clock()
        lease_id, ttl = await self.storage.grant_lease(self.ttl_s)
        revision, holder = await self.storage.create_with_lease(self.key, self.address.encode(), lease_id)
        if not revision:  # another replica was faster
            self.leader_address = holder.decode(errors="replace")
            await self.storage.revoke_lease(lease_id)
            return False
        self.lease_id, self.revision, self._granted_ttl = lease_id, revision, float(ttl)
        self.lease.renewed(sent, ttl)
        self.leader_address = self.address
        self.storage.fence(self.key, revision)
        log.info("GCS replica %s is the leader (lease TTL %d s, revision %d)", self.address, ttl, revision)
        return True

    async def keep(self, stop: asyncio.Event) -> None:
        """Renews the lease until stop is set or the leadership is lost (then `lost` is set)."""
        while not stop.is_set() and not self.lost.is_set():
            now = self._clock()
            if not self.lease.holds(now):
                if not await self._confirm(stop):
                    return
                continue
            try:
                await asyncio.wait_for(stop.wait(), self.lease.next_renewal(now, self._granted_ttl))
                return
            except asyncio.TimeoutError:
                pass
            sent = self._clock()
            left = self.lease.valid_until - sent
            if left <= 0:
                continue  # the check above reports it
            try:
                ttl = await asyncio.wait_for(self.storage.refresh_lease(self.lease_id), left)
            except (StorageUnavailable, asyncio.TimeoutError) as e:
                log.warning("GCS leader %s: renewing its lease failed (%s); retrying", self.address, e)
                continue
            if ttl <= 0:
                self.lose("etcd says its lease has expired")
                return
            self.lease.renewed(sent, ttl)

    async def _confirm(self, stop: asyncio.Event) -> bool:
        """Past the local bound (the gate is closed): renews with etcd until it answers, for up
        to one more TTL. True when etcd still held the lease (leading again); else the
        leadership is lost (False), as it is when stop is set meanwhile."""
        give_up = self.lease.valid_until + self._granted_ttl
        if self.on_serving is not None:
            await self.on_serving(False)
        while not stop.is_set():
            sent = self._clock()
            if sent >= give_up:
                self.lose(f"its lease could not be renewed before it ended (etcd did not answer "
                          f"within {self._granted_ttl:.0f} s more)")
                return False
            try:
                ttl = await asyncio.wait_for(self.storage.refresh_lease(self.lease_id), give_up - sent)
            except (StorageUnavailable, asyncio.TimeoutError):
                await asyncio.sleep(min(0.1, max(0.0, give_up - self._clock())))
                continue
            if ttl <= 0:
                self.lose("its lease ended before a renewal reached etcd")
                return False
            self.lease.renewed(sent, ttl)
            if self.on_serving is not None:
                await self.on_serving(True)
            log.warning("GCS leader %s renewed its lease %.2f s after its local bound ended; serving again",
                        self.address, sent - (give_up - self._granted_ttl))
            return True
        return False

    async def resign(self) -> None:
        """Ends the lease (a graceful stop): the key goes at once and a follower takes over."""
        if self.lease_id and self.revision and not self.lost.is_set():
            try:
                await self.storage.revoke_lease(self.lease_id)
            except StorageUnavailable as e:  # the lease then ends by its TTL
                log.warning("GCS leader %s could not resign (%s); its lease ends by itself", self.address, e)
        self.revision = 0
