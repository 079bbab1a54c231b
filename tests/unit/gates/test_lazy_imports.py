"""`import ember` loads no library (data, serve, train, tune) and none of their heavy
dependencies; the libraries load on first attribute access. Checked in fresh interpreters (two,
to keep the unit tier quick), so nothing else imported them first. (A worker that ran a plain
task is checked in tests/integration/core/test_lazy_imports_worker.py.)"""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

LIBRARIES = ("ember.data", "ember.serve", "ember.train", "ember.tune")
# Dependencies of the libraries only; none of them may load with `import ember`.
HEAVY = ("starlette", "fastapi", "uvicorn", "httpx", "pandas", "torch", "pyarrow.dataset")

CLIENT = """
import json, sys
import ember
out = {"import": sorted(sys.modules)}
try:
    ember.not_a_library
except AttributeError as e:
    out["unknown"] = str(e)
ember.serve, ember.train.ScalingConfig, ember.experimental.internal_kv
out["first_use"] = sorted(sys.modules)
print(json.dumps(out))
"""
# Each service's process entry; one interpreter imports them all (none may load a library).
SERVICES = """
import json, sys
import ember_gcs.__main__, ember_raylet.__main__, ember_objmgr.__main__
print(json.dumps({"services": sorted(sys.modules)}))
"""


def loaded(mods: list[str], names: tuple[str, ...]) -> list[str]:
    """The names (or their submodules) among mods."""
    return sorted(m for m in mods for n in names if m == n or m.startswith(n + "."))


@pytest.fixture(scope="module")
def modules() -> dict[str, object]:
    """sys.modules snapshots of fresh interpreters (started together)."""
    procs = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for code in (CLIENT, SERVICES)]
    out: dict[str, object] = {}
    for proc in procs:
        stdout, stderr = proc.communicate(timeout=60)
        assert proc.returncode == 0, stderr
        out.update(json.loads(stdout.strip().splitlines()[-1]))
    return out


def test_import_ember_loads_no_library(modules):
    assert "ember" in modules["import"]
    assert not loaded(modules["import"], LIBRARIES)


def test_import_ember_loads_no_heavy_dependency(modules):
    assert not loaded(modules["import"], HEAVY)


def test_a_library_loads_on_first_use(modules):
    assert {"ember.serve", "ember.train", "ember.experimental.internal_kv"} <= set(modules["first_use"])
    assert "ember.experimental" not in modules["import"]


def test_the_checker_sees_a_loaded_dependency(modules):
    """The checks above cannot pass by accident: once Serve is used, it and starlette are seen."""
    assert loaded(modules["first_use"], ("ember.serve",))
    assert loaded(modules["first_use"], ("starlette",))


def test_unknown_attributes_still_fail(modules):
    assert modules["unknown"] == "module 'ember' has no attribute 'not_a_library'"


def test_services_load_no_library_dependency(modules):
    assert {"ember_gcs.__main__", "ember_raylet.__main__", "ember_objmgr.__main__"} <= set(modules["services"])
    assert not loaded(modules["services"], LIBRARIES + HEAVY)
