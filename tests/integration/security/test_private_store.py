"""Multi-user hosts, the object store: another user (uid 65534, "nobody") can neither read a
put() payload from the node's arena nor plant the store's root first. The other user runs in a
real setuid child, so this needs root (CI and the dev container run as root)."""
from __future__ import annotations

import os
import stat
import subprocess
import tempfile

import numpy as np
import pytest

import ember
from ember._private import node as node_mod
from ember._private import worker as ember_worker
from ember._private.private_fs import UnsafePathError

OTHER = 65534
pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run a second user (setuid)")


def as_other(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(list(argv), user=OTHER, group=OTHER, cwd="/", env={"PATH": "/usr/bin:/bin"},
                          capture_output=True, text=True, timeout=30)


def test_arena_and_its_root_are_private_to_their_user():
    ember.init(num_cpus=1, object_store_memory=32 * 2**20)
    try:
        secret = np.frombuffer(b"payload-of-user-0" * 1000, dtype=np.uint8)
        ref = ember.put(secret)
        store_dir = ember_worker._gcs_nodes()[0].store_dir
        arena = os.path.join(store_dir, "arena")
        root = node_mod.store_parent()
        assert store_dir.startswith(root + os.sep) and str(os.geteuid()) in os.path.basename(root)
        assert stat.S_IMODE(os.stat(root).st_mode) == 0o700 and os.stat(root).st_uid == os.geteuid()
        assert stat.S_IMODE(os.stat(arena).st_mode) == 0o600
        r = as_other("cat", arena)
        assert r.returncode != 0 and "Permission denied" in r.stderr, r
        assert b"payload-of-user-0" in bytes(ember.get(ref))  # the owner still reads it
    finally:
        ember.shutdown()


@pytest.fixture
def shared():
    """A world-writable sticky directory, like /dev/shm, that both users can create entries in."""
    d = tempfile.mkdtemp(prefix="ember-mu-")
    os.chmod(d, 0o1777)
    yield d
    subprocess.run(["rm", "-rf", d], check=False)


def test_store_root_planted_by_another_user_is_refused(shared, tmp_path, monkeypatch):
    monkeypatch.setattr(node_mod, "default_store_root", lambda: shared)
    planted = node_mod.store_parent()
    r = as_other("mkdir", "-m", "0777", planted)
    assert r.returncode == 0, r.stderr
    with pytest.raises(UnsafePathError, match=rf"{planted}.*owned by nobody \(uid {OTHER}\)"):
        node_mod.start_node(str(tmp_path / "session"), "127.0.0.1:1", resources={"CPU": 1},
                            object_store_memory=2**20, is_head=True)
