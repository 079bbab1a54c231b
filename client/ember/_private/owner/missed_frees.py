"""The Frees that nodes missed, kept by the owner until each node is alive again.

An owner frees a shared-memory object by sending `Free` to every live node (core_worker's
`free_objects`). A node that was only silent (a network cut, a long pause) is declared dead by
the GCS and later registers again with its object store intact; the Frees of its dead spell
skipped it (it was dead in the owner's node view) or failed (it did not answer), and its copies
of those objects would stay until their owners died. So the owner records, per node, the ids
whose Free the node missed, and sends them when the node is alive again: the node ends with no
copy its owner freed. The owner is the one process that knows what it freed, so no other part
has to guess (the node cannot tell which of its copies are still referenced, and dropping them
all would lose primaries its owners still list; Ray instead kills a raylet the GCS declared dead).

Bounded: a node counts as coming back only within `ttl_s` of the owner first seeing it dead (or
of its first missed Free), after which it is taken to be gone for good and its ids are dropped;
at most `max_per_node` ids per node (the oldest go first). A node back after that keeps those
copies until their owners die, as before. Pure: an injected clock, no I/O (the owner's loop
sends, see object_transfer.ObjectTransfer._resend_missed_frees).
"""
from __future__ import annotations

import time
from typing import Callable, Iterable

TTL_S = 600.0  # as long as the GCS replays worker deaths to late subscribers
MAX_PER_NODE = 100_000
MAX_DEAD_NODES = 1024  # dead nodes whose first sighting is remembered (the oldest go first)


class MissedFrees:
    """Object ids per node whose Free the node missed (see the module docstring)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, ttl_s: float = TTL_S,
                 max_per_node: int = MAX_PER_NODE) -> None:
        if ttl_s <= 0 or max_per_node <= 0:
            raise ValueError(f"ttl_s and max_per_node must be > 0 (got {ttl_s}, {max_per_node})")
        self._clock = clock
        self.ttl_s = ttl_s
        self.max_per_node = max_per_node
        self._pending: dict[str, dict[bytes, None]] = {}  # node -> ids (an ordered set)
        self._since: dict[str, float] = {}  # node -> when it was first seen dead / first missed one
        self.dropped = 0  # ids given up on (over the cap, or their node gone for good)

    def __len__(self) -> int:
        return sum(len(ids) for ids in self._pending.values())

    def nodes(self) -> list[str]:
        """Nodes with Frees waiting for them."""
        return list(self._pending)

    def missed(self, node_ids: Iterable[str], oids: Iterable[bytes]) -> None:
        """These nodes did not get the Free of oids (dead in the owner's view, or the call
        failed). Ignored for a node seen dead for longer than ttl_s: gone for good."""
        now = self._clock()
        ids = list(oids)
        for nid in node_ids:
            since = self._since.setdefault(nid, now)
            if len(self._since) > MAX_DEAD_NODES:
                self._forget_oldest()
            if now - since > self.ttl_s:
                continue
            self._since.setdefault(nid, since)  # (kept while ids wait)
            pending = self._pending.setdefault(nid, {})
            pending.update(dict.fromkeys(ids))
            over = len(pending) - self.max_per_node
            if over > 0:
                for oid in list(pending)[:over]:
                    del pending[oid]
                self.dropped += over

    def take(self, alive: Iterable[str]) -> dict[str, list[bytes]]:
        """The ids to send now, per node alive again; they leave the table (`missed` puts back
        those whose Free fails again)."""
        out = {}
        for nid in alive:
            ids = self._pending.pop(nid, None)
            if ids:
                out[nid] = list(ids)
        return out

    def alive(self, node_id: str) -> None:
        """The node answered a Free: its next dead spell starts a new ttl_s."""
        if node_id not in self._pending:
            self._since.pop(node_id, None)

    def expire(self) -> int:
        """Drops the ids of nodes dead for longer than ttl_s; returns how many went."""
        now = self._clock()
        n = 0
        for nid in [nid for nid in self._pending if now - self._since.get(nid, now) > self.ttl_s]:
            n += len(self._pending.pop(nid))
        self.dropped += n
        return n

    def _forget_oldest(self) -> None:
        for nid in list(self._since):
            if nid not in self._pending:
                del self._since[nid]
                return
