"""A worker that ran a plain task (and its driver) has loaded no library (data, serve, train,
tune) and none of their heavy dependencies: `import ember` in a worker pays for none of them."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap

LIBRARIES = ("ember.data", "ember.serve", "ember.train", "ember.tune")
HEAVY = ("starlette", "fastapi", "uvicorn", "httpx", "pandas", "torch", "pyarrow.dataset")

DRIVER = textwrap.dedent("""
    import json, os, sys
    import ember

    ember.init(num_cpus=1, object_store_memory=64 * 2**20)

    @ember.remote
    def plain(x):
        import os, sys
        return os.getpid(), sorted(sys.modules), x + 1

    pid, worker_mods, y = ember.get(plain.remote(1))
    assert y == 2 and pid != os.getpid()
    print(json.dumps({"worker": worker_mods, "driver": sorted(sys.modules)}))
    ember.shutdown()
""")


def _loaded(mods: list[str], names: tuple[str, ...]) -> list[str]:
    return sorted(m for m in mods for n in names if m == n or m.startswith(n + "."))


def test_a_worker_running_a_plain_task_loads_no_library():
    proc = subprocess.run([sys.executable, "-c", DRIVER], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert "ember._private.execution.executor" in out["worker"], "not a worker's module list"
    assert not _loaded(out["worker"], LIBRARIES + HEAVY), _loaded(out["worker"], LIBRARIES + HEAVY)
    assert not _loaded(out["driver"], LIBRARIES + HEAVY), _loaded(out["driver"], LIBRARIES + HEAVY)
