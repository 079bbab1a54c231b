"""Multi-user hosts: another user (uid 65534, "nobody") plants Ember's temp dir, the
current-cluster pointer, a node file or a symlink first; the current user's Ember refuses them
with an error naming the path and the owner, and what it creates is 0700 (dirs) / 0600 (files).

The planting runs in a real child process under the other uid, so this needs root (CI and the
dev container run as root); without it the two-user setup cannot be built."""
from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import tempfile
import time

import pytest

from ember._private import node as node_mod
from ember._private import private_fs
from ember._private.private_fs import UnsafePathError

OTHER = 65534
EMBER = os.path.join(os.path.dirname(sys.executable), "ember")
pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run a second user (setuid)")


@pytest.fixture
def shared():
    """A world-writable sticky directory, like /tmp, that both users can create entries in."""
    d = tempfile.mkdtemp(prefix="ember-mu-")
    os.chmod(d, 0o1777)
    yield d
    subprocess.run(["rm", "-rf", d], check=False)


def as_other(script: str) -> None:
    """Runs shell `script` as the other user (a real setuid child)."""
    subprocess.run(["/bin/sh", "-c", script], user=OTHER, group=OTHER, check=True, cwd="/",
                   env={"PATH": "/usr/bin:/bin"}, timeout=30)


def mode(path: str) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def test_temp_root_created_by_another_user_is_refused(shared):
    root = os.path.join(shared, "ember-tmp")
    as_other(f"mkdir -m 755 {root}")
    with pytest.raises(UnsafePathError, match=rf"{root}.*owned by nobody \(uid {OTHER}\)"):
        private_fs.ensure_private_dir(root)


def test_symlinked_or_world_writable_temp_root_is_refused(shared, tmp_path):
    link = os.path.join(shared, "ember-link")
    as_other(f"ln -s {tmp_path} {link}")
    with pytest.raises(UnsafePathError, match=rf"{link}: it is a symlink"):
        private_fs.ensure_private_dir(link)
    mine = os.path.join(shared, "ember-mine")
    os.mkdir(mine)
    os.chmod(mine, 0o777)
    with pytest.raises(UnsafePathError, match=rf"{mine}: it is writable by group or others"):
        private_fs.ensure_private_dir(mine)


def test_default_root_is_per_user():
    assert private_fs.default_temp_root() == os.path.join(tempfile.gettempdir(), f"ember-{os.geteuid()}")


def test_planted_current_cluster_pointer_is_not_trusted(shared):
    """The other user's root with a pointer at their fake GCS: a driver resolving
    address='auto' gets an error, never the fake address (which would receive its token)."""
    root = os.path.join(shared, "ember-tmp")
    pointer = json.dumps({"gcs_address": "127.0.0.1:1", "session_dir": "/"})
    as_other(f"mkdir -m 755 {root} && printf '%s' '{pointer}' > {root}/ember_current_cluster")
    r = subprocess.run([sys.executable, "-c", "from ember._private import node; "
                        "print(node.read_current_cluster())"],
                       env=dict(os.environ, EMBER_TEMP_DIR=root), capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "127.0.0.1:1" not in r.stdout
    assert f"refusing to use {root}: it is owned by nobody" in r.stderr


def test_pointer_file_owned_by_another_user_is_refused(tmp_path, monkeypatch):
    root = str(tmp_path / "root")
    monkeypatch.setattr(node_mod, "EMBER_TMP", root)
    monkeypatch.setattr(node_mod, "CURRENT_CLUSTER_FILE", os.path.join(root, "ember_current_cluster"))
    node_mod.write_current_cluster({"gcs_address": "127.0.0.1:7"})
    assert node_mod.read_current_cluster() == {"gcs_address": "127.0.0.1:7"}
    assert mode(root) == 0o700 and mode(node_mod.CURRENT_CLUSTER_FILE) == 0o600
    os.chown(node_mod.CURRENT_CLUSTER_FILE, OTHER, OTHER)
    with pytest.raises(UnsafePathError, match="ember_current_cluster: it is owned by nobody"):
        node_mod.read_current_cluster()


def test_session_dirs_are_0700_and_logs_0600_never_through_a_symlink(tmp_path, monkeypatch):
    root = str(tmp_path / "root")
    monkeypatch.setattr(node_mod, "EMBER_TMP", root)
    session = node_mod.new_session_dir()
    assert [mode(p) for p in (root, session, os.path.join(session, "logs"))] == [0o700] * 3
    log = os.path.join(session, "logs", "gcs.out")
    with private_fs.open_private(log) as f:
        f.write(b"x")
    assert mode(log) == 0o600
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    os.symlink(victim, os.path.join(session, "logs", "raylet.out"))
    with pytest.raises(UnsafePathError, match="raylet.out: it is a symlink"):
        private_fs.open_private(os.path.join(session, "logs", "raylet.out"))
    assert victim.read_text() == "precious"


def test_ember_stop_ignores_a_planted_node_file(shared, tmp_path):
    """The other user's root holds a node file naming the victim's process and directory:
    `ember stop` refuses it, the process lives on and the directory stays."""
    victim = subprocess.Popen(["sleep", "60"])
    try:
        victim_dir = tmp_path / "victim-dir"
        victim_dir.mkdir()
        root = os.path.join(shared, "ember-tmp")
        rec = json.dumps({"node_id": "n1", "pids": [victim.pid], "store_dir": str(victim_dir),
                          "is_head": True})
        as_other(f"mkdir -p {root}/nodes && printf '%s' '{rec}' > {root}/nodes/n1.json")
        r = subprocess.run([EMBER, "stop"], env=dict(os.environ, EMBER_TEMP_DIR=root),
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 1 and f"refusing to use {root}: it is owned by nobody" in r.stderr
        time.sleep(0.1)
        assert victim.poll() is None and victim_dir.is_dir()
    finally:
        victim.kill()
        victim.wait()


def test_ember_stop_signals_only_the_current_users_processes(tmp_path):
    """A node file in the user's own root naming another user's process: skipped, not signalled."""
    other = subprocess.Popen(["sleep", "60"], user=OTHER, group=OTHER)
    root = str(tmp_path / "root")
    os.makedirs(os.path.join(root, "nodes"), mode=0o700)
    os.chmod(root, 0o700)
    private_fs.write_private_json(os.path.join(root, "nodes", "n1.json"),
                                  {"node_id": "n1", "pids": [other.pid], "store_dir": "", "is_head": True})
    try:
        r = subprocess.run([EMBER, "stop"], env=dict(os.environ, EMBER_TEMP_DIR=root),
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        assert f"skipping pid {other.pid}" in r.stderr and "(0 processes)" in r.stdout
        time.sleep(0.1)
        assert other.poll() is None
    finally:
        other.kill()
        other.wait()


def test_planted_node_file_in_own_root_is_refused(tmp_path):
    root = str(tmp_path / "root")
    nodes = os.path.join(root, "nodes")
    os.makedirs(nodes, mode=0o700)
    os.chmod(root, 0o700)
    path = os.path.join(nodes, "n1.json")
    with open(path, "w") as f:
        json.dump({"node_id": "n1", "pids": [], "store_dir": "", "is_head": True}, f)
    os.chown(path, OTHER, OTHER)
    r = subprocess.run([EMBER, "stop"], env=dict(os.environ, EMBER_TEMP_DIR=root),
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and f"refusing to use {path}: it is owned by nobody" in r.stderr


def test_ember_start_refuses_a_temp_root_of_another_user(shared):
    root = os.path.join(shared, "ember-tmp")
    as_other(f"mkdir -m 777 {root}")
    r = subprocess.run([EMBER, "start", "--head", "--port", "0"], env=dict(os.environ, EMBER_TEMP_DIR=root),
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and f"refusing to use {root}: it is owned by nobody" in r.stderr
    assert os.listdir(root) == []
