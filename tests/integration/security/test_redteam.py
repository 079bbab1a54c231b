"""scripts/redteam.py end to end: it starts its own loopback cluster, runs every check, prints
one PASS line per check and exits 0, well within the time `make test` gives it."""
from __future__ import annotations

import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
SCRIPT = os.path.join(ROOT, "scripts", "redteam.py")


def _run(*args: str, timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL, errors="replace", cwd=ROOT)


def test_every_red_team_check_passes():
    names = _run("--list", timeout=60).stdout.splitlines()
    assert len(names) >= 18 and len(set(names)) == len(names), names
    t0 = time.monotonic()
    done = _run(timeout=110)
    elapsed = time.monotonic() - t0
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith(("PASS ", "FAIL "))]
    report = "\n".join(lines) + "\n" + done.stderr[-3000:]
    assert done.returncode == 0, report
    assert len(lines) == len(names), report
    assert all(ln.startswith(f"PASS {n}: ") for ln, n in zip(lines, names, strict=True)), report
    assert elapsed < 110, elapsed
