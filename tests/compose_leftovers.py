"""Compose projects that an earlier test run left behind.

The suites' compose projects are named PREFIX + the pid of the pytest process that started them
(`embere2e1234`, `emberchaos1234`) and are always brought down when that process ends normally.
A run that was killed (a CI timeout, a machine restart) leaves its containers, and their
`restart: unless-stopped` policy brings them back whenever the Docker engine restarts, still
publishing their host ports (the dashboard's 8265 by default). Such a project is stale when no
process with its pid is alive any more, or when that pid now belongs to a process other than
pytest; only stale projects of the given prefixes are removed, so two runs on one engine never
touch each other's clusters.
"""
from __future__ import annotations

import re
import subprocess

import psutil

PROJECT_LABEL = "com.docker.compose.project"


def _is_pytest(pid: int) -> bool:
    try:
        cmd = " ".join(psutil.Process(pid).cmdline())
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return False
    return "pytest" in cmd


def stale_projects(prefixes: tuple[str, ...], projects: set[str]) -> list[str]:
    """The projects among `projects` named PREFIX<pid> (a prefix of `prefixes`) whose pytest
    process is gone."""
    stale = []
    for name in sorted(projects):
        for prefix in prefixes:
            m = re.fullmatch(re.escape(prefix) + r"(\d+)", name)
            if m and not _is_pytest(int(m.group(1))):
                stale.append(name)
    return stale


def _docker(*args: str) -> str:
    r = subprocess.run(["docker", *args], capture_output=True, text=True, errors="replace", timeout=120)
    return r.stdout


def remove_stale_projects(*prefixes: str) -> list[str]:
    """Removes the containers, networks and volumes of stale projects (saying so on stdout);
    returns their names."""
    projects = set(_docker("ps", "-a", "--format", "{{.Label \"%s\"}}" % PROJECT_LABEL).split())
    stale = stale_projects(prefixes, projects)
    for project in stale:
        label = f"label={PROJECT_LABEL}={project}"
        containers = _docker("ps", "-aq", "--filter", label).split()
        if containers:
            _docker("rm", "-f", "-v", *containers)
        for kind in ("network", "volume"):
            names = _docker(kind, "ls", "-q", "--filter", label).split()
            if names:
                _docker(kind, "rm", *names)
    if stale:
        print(f"\nremoved compose projects left by killed test runs: {stale}")
    return stale
