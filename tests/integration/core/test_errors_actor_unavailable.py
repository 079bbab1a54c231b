"""ActorUnavailableError, as Ray raises it: a call with no retries (max_task_retries=0) to an
actor that restarts — the call was running when its worker died, or it was sent while the actor
was restarting — fails with ActorUnavailableError (the actor lives on; the call may or may not
have run), not ActorDiedError; an actor with no restarts left still gives ActorDiedError."""
from __future__ import annotations

import os
import signal
import time

import pytest

import ember
from ember import exceptions as ex
from ember.testing import process_gone, wait_for
from ember_common.gcs_client import SyncGcsClient
from ember_common.proto import common_pb2

A = common_pb2.ActorInfo
T = 60


@ember.remote(max_restarts=1)
class Phoenix:
    def __init__(self, slow_restart: float = 0.0) -> None:
        if ember.get_runtime_context().was_current_actor_reconstructed:
            time.sleep(slow_restart)

    def pid(self) -> int:
        return os.getpid()

    def slow(self, marker: str) -> int:
        with open(marker, "w") as f:
            f.write("started")
        time.sleep(30)
        return 0


def _state(handle) -> int:
    with SyncGcsClient(ember.get_runtime_context().gcs_address, timeout_s=5) as gcs:
        return gcs.get_actor_info(handle._ember_actor_id).state


def _sigkill(pid: int) -> None:
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: process_gone(pid), timeout_s=10, what=f"process {pid} to die")


def test_a_call_running_when_a_restartable_actor_dies_is_unavailable(ray_start, tmp_path):
    a = Phoenix.remote()
    try:
        pid = ember.get(a.pid.remote(), timeout=T)
        marker = tmp_path / "started"
        ref = a.slow.remote(str(marker))
        wait_for(marker.exists, timeout_s=20, what="the call to start")
        _sigkill(pid)
        with pytest.raises(ex.ActorUnavailableError) as info:
            ember.get(ref, timeout=T)
        assert not isinstance(info.value, ex.ActorDiedError)
        assert isinstance(info.value, ex.RayActorError)
        assert "slow()" in str(info.value) and "may or may not have been executed" in str(info.value) and str(info.value).count("unavailable") == 1
        # it restarted: later calls run on the new worker
        assert wait_for(lambda: _pid_or_none(a), timeout_s=T, what="the restarted actor") != pid
    finally:
        ember.kill(a)


def test_a_call_sent_while_the_actor_restarts_is_unavailable(ray_start):
    a = Phoenix.remote(slow_restart=8.0)
    try:
        pid = ember.get(a.pid.remote(), timeout=T)
        _sigkill(pid)
        wait_for(lambda: _state(a) == A.RESTARTING, timeout_s=20, what="the actor to restart")
        start = time.monotonic()
        with pytest.raises(ex.ActorUnavailableError):
            ember.get(a.pid.remote(), timeout=T)
        assert time.monotonic() - start < 6.0  # failed while it restarts, not after
        assert wait_for(lambda: _pid_or_none(a), timeout_s=T, what="the restarted actor") != pid
    finally:
        ember.kill(a)


def test_an_actor_with_no_restarts_left_still_dies(ray_start, tmp_path):
    a = Phoenix.options(max_restarts=0).remote()
    pid = ember.get(a.pid.remote(), timeout=T)
    marker = tmp_path / "started"
    ref = a.slow.remote(str(marker))
    wait_for(marker.exists, timeout_s=20, what="the call to start")
    _sigkill(pid)
    with pytest.raises(ex.ActorDiedError):
        ember.get(ref, timeout=T)


def _pid_or_none(a) -> int | None:
    try:
        return ember.get(a.pid.remote(), timeout=T)
    except ex.ActorUnavailableError:
        return None
