"""Compose projects left by a killed test run are removed before a suite brings up its own
(tests/compose_leftovers.py): their containers come back with the engine (`restart:
unless-stopped`) and would hold the host ports a new cluster publishes. A project whose pytest
process still runs is never touched."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
from compose_leftovers import PROJECT_LABEL, remove_stale_projects, stale_projects

IMAGE = "ember-etcd:latest"  # the smallest image `make images` builds (run with --entrypoint sleep)


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def test_only_projects_whose_pytest_process_is_gone_are_stale() -> None:
    sleeper = subprocess.Popen(["sleep", "60"])  # alive, but not pytest
    try:
        dead = _dead_pid()
        projects = {f"embere2e{os.getpid()}", f"embere2e{dead}", f"emberchaos{sleeper.pid}",
                    f"other{dead}", f"embere2e{dead}x", "embere2e"}
        assert stale_projects(("embere2e", "emberchaos"), projects) == sorted(
            [f"embere2e{dead}", f"emberchaos{sleeper.pid}"])
    finally:
        sleeper.kill()
        sleeper.wait()


def _run(*args: str) -> str:
    r = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


def test_a_stale_projects_containers_network_and_volume_are_removed_and_a_live_one_kept() -> None:
    if subprocess.run(["docker", "image", "inspect", IMAGE], capture_output=True).returncode != 0:
        pytest.fail(f"image {IMAGE} is not built: run `make images` (docker/build-offline.sh)")
    # a prefix of its own: this session's real e2e cluster is project embere2e<our pid>
    stale, live = f"emberleftovers{_dead_pid()}", f"emberleftovers{os.getpid()}"
    made: dict[str, list[str]] = {"container": [], "network": [], "volume": []}
    try:
        for project in (stale, live):
            label = f"{PROJECT_LABEL}={project}"
            made["network"].append(_run("network", "create", "--label", label, f"{project}_default"))
            made["volume"].append(_run("volume", "create", "--label", label, f"{project}_data"))
            made["container"].append(_run("run", "-d", "--label", label, "--network", f"{project}_default",
                                          "--restart", "unless-stopped", "--entrypoint", "sleep", IMAGE, "600"))
        assert remove_stale_projects("emberleftovers") == [stale]
        for kind, ids in made.items():
            present = [subprocess.run(["docker", kind, "inspect", i], capture_output=True).returncode == 0
                       for i in ids]
            assert present == [False, True], (kind, present)
    finally:
        subprocess.run(["docker", "rm", "-f", *made["container"]], capture_output=True)
        for kind in ("network", "volume"):
            subprocess.run(["docker", kind, "rm", *made[kind]], capture_output=True)
