"""Identifiers: random bytes, shown as hex. Object ids are the task id plus a return index."""
from __future__ import annotations

import os
import random
import struct
import threading

# os.urandom is a system call per id (tens of microseconds in some sandboxes); a process-local
# generator seeded from it once (and again in a forked child) is as unique and much cheaper.
_lock = threading.Lock()
_rng = random.Random(os.urandom(32))


def _reseed() -> None:
    _rng.seed(os.urandom(32))


os.register_at_fork(after_in_child=_reseed)


def random_bytes(n: int) -> bytes:
    with _lock:
        return _rng.getrandbits(8 * n).to_bytes(n, "little")

TASK_ID_LEN = 16
OBJECT_ID_LEN = TASK_ID_LEN + 4
# Made elsewhere, checked at every service's edge (validate_rules): actor and lease ids are
# random 16 bytes, placement group ids 18 (Ray's PlacementGroupID), job ids the GCS's 4-byte
# counter.
ACTOR_ID_LEN = 16
LEASE_ID_LEN = 16
PLACEMENT_GROUP_ID_LEN = 18
JOB_ID_LEN = 4


def new_task_id() -> bytes:
    return random_bytes(TASK_ID_LEN)


def object_id_for_return(task_id: bytes, index: int) -> bytes:
    """Id of the index-th return value of a task (index >= 1; 0 is never used)."""
    return task_id + struct.pack(">I", index)


def new_put_id() -> bytes:
    """Id of an object created by put(): a fresh random task id with index 0."""
    return random_bytes(TASK_ID_LEN) + b"\x00\x00\x00\x00"


def new_worker_id() -> str:
    return os.urandom(8).hex()


def new_node_id() -> str:
    return os.urandom(14).hex()
