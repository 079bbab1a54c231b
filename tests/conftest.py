"""Shared fixtures. Every module is checked for leaked processes and object-store directories,
and for a driver it left connected, when it ends (the autouse fixture below is set up first, so
it is torn down last).

Auth: the whole session runs with HOME in a temporary directory and no EMBER_AUTH_* variables,
so every cluster takes the default path (token mode, ~/.ember/auth_token created on first use)
without touching the real ~/.ember."""
from __future__ import annotations

import glob
import os
import signal
import sys
import time

import psutil
import pytest

# A run started in the background by a non-interactive shell (`make test &`) inherits SIGINT
# ignored, and so would every driver the tests start: the Ctrl-C tests need it to mean
# KeyboardInterrupt, as it does for a user (a Python handler here is the default again after exec).
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def _store_dirs() -> set[str]:
    """Object store arenas and spill directories of sessions this test process started."""
    mine = f"session_*_{os.getpid()}_*"
    return (set(glob.glob(f"/dev/shm/ember-store-{os.geteuid()}/{mine}/*"))
            | set(glob.glob(f"/tmp/ember-{os.geteuid()}/{mine}/spill/*")))


@pytest.fixture(autouse=True, scope="session")
def small_prefault():
    """The suite starts about a hundred clusters, most with a default-sized store; each would
    populate 2 GiB of arena (seconds of CPU) that no test of theirs uses. The prefault itself is
    tested with the default in test_store_resident.py and test_store_prefault.py."""
    mp = pytest.MonkeyPatch()
    mp.setenv("EMBER_OBJECT_STORE_PREFAULT_BYTES", str(256 * 2**20))
    yield
    mp.undo()


@pytest.fixture(autouse=True, scope="session")
def auth_home(tmp_path_factory):
    """HOME is a temporary directory with a fresh ~/.ember/auth_token; auth variables cleared."""
    from ember_common import auth

    mp = pytest.MonkeyPatch()
    mp.setenv("HOME", str(tmp_path_factory.mktemp("home")))
    for name in (auth.MODE_ENV, auth.TOKEN_ENV, auth.PATH_ENV):
        mp.delenv(name, raising=False)
    auth.reset()
    auth.ensure_token()  # as the first `ember start --head` / ember.init() would; services started
    yield               # directly by a test find it too
    mp.undo()
    auth.reset()


def _cmd(p: psutil.Process) -> str:
    try:
        return " ".join(p.cmdline()[:4])
    except psutil.Error:  # gone, or a zombie, meanwhile
        return "?"


def _live(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:  # exited between the listing and the look
        return False


@pytest.fixture(autouse=True, scope="module")
def no_leaks(auth_home):
    before_dirs = _store_dirs()
    yield
    ember = sys.modules.get("ember")
    left_connected = ember is not None and ember.is_initialized()
    if left_connected:  # disconnect, so that the modules after this one start clean
        ember.shutdown()
    me = psutil.Process()
    deadline = time.monotonic() + 10
    while True:
        alive = [p for p in me.children(recursive=True) if _live(p)]
        leaked_dirs = _store_dirs() - before_dirs
        if (not alive and not leaked_dirs) or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    leaked = [(p.pid, _cmd(p)) for p in alive]
    for p in alive:
        p.kill()
    assert not alive, f"processes leaked: {leaked}"
    assert not leaked_dirs, f"object store dirs leaked: {sorted(leaked_dirs)}"
    assert not left_connected, "the module left its driver connected: ember.shutdown() in its teardown"


@pytest.fixture(scope="module")
def ray_start():
    """An embedded cluster with 2 CPUs, 1 logical GPU and a custom resource; stopped at the end."""
    import ember

    ember.init(num_cpus=2, num_gpus=1, resources={"custom": 2}, object_store_memory=256 * 2**20)
    yield ember
    ember.shutdown()
