"""`import ember` loads no library (data, serve, train, tune) and none of their heavy
dependencies; the libraries load on first attribute access. Checked in fresh interpreters, so
nothing else imported them first. (A worker that ran a plain task is checked in
tests/integration/test_lazy_imports_worker.py.)"""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

LIBRARIES = ("ember.data", "ember.serve", "ember.train", "ember.tune")
# Dependencies of the libraries only; none of them may load with `import ember`.
HEAVY = ("starlette", "fastapi", "uvicorn", "httpx", "pandas", "torch", "pyarrow.dataset")


def modules_after(code: str) -> set[str]:
    """sys.modules of a fresh interpreter after running code."""
    proc = subprocess.run([sys.executable, "-c", code + "\nimport json, sys\n"
                           "print(json.dumps(sorted(sys.modules)))"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return set(json.loads(proc.stdout.strip().splitlines()[-1]))


def loaded(mods: set[str], names: tuple[str, ...]) -> list[str]:
    """The names (or their submodules) among mods."""
    return sorted(m for m in mods for n in names if m == n or m.startswith(n + "."))


@pytest.fixture(scope="module")
def after_import() -> set[str]:
    return modules_after("import ember")


def test_import_ember_loads_no_library(after_import):
    assert "ember" in after_import
    assert not loaded(after_import, LIBRARIES)


def test_import_ember_loads_no_heavy_dependency(after_import):
    assert not loaded(after_import, HEAVY)


def test_a_library_loads_on_first_use():
    mods = modules_after("import ember\nember.serve\nember.train")
    assert {"ember.serve", "ember.train"} <= mods


def test_unknown_attributes_still_fail():
    proc = subprocess.run([sys.executable, "-c", "import ember\nember.not_a_library"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0
    assert "module 'ember' has no attribute 'not_a_library'" in proc.stderr


def test_the_checker_sees_a_loaded_dependency():
    """The checks above could not pass by accident: a module that is loaded is seen."""
    mods = modules_after("import ember\nimport ember.serve")
    assert loaded(mods, ("ember.serve",)) and loaded(mods, ("starlette",))


@pytest.mark.parametrize("entry", ["ember_gcs.__main__", "ember_raylet.__main__",
                                   "ember_objmgr.__main__"])
def test_services_load_no_library_dependency(entry):
    mods = modules_after(f"import {entry}")
    assert not loaded(mods, LIBRARIES + HEAVY)
