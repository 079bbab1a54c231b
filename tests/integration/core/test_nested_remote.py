"""Remote functions, actor classes, handles and methods pickle at any time — also after their first
call — so the commonest nested pattern (a task that calls another remote function) works whether
they are defined in the driver's `__main__` or in an importable module."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

import ember

MODULE = '''
import ember as ray

@ray.remote
def small():
    return 1

@ray.remote
def outer():
    return ray.get(small.remote()) + 1

@ray.remote
class Caller:
    def call(self):
        return ray.get(small.remote()) + 10
'''

CHECKS = '''
assert ray.get(small.remote()) == 1            # the first call builds per-process state
assert ray.get(outer.remote()) == 2            # outer captures small after that call
c = Caller.remote()
assert ray.get(c.call.remote()) == 11          # an actor class whose method calls small
fast = small.options(num_cpus=0.5)
assert ray.get(fast.remote()) == 1

@ray.remote
def via_closure():
    return ray.get(fast.remote()) + ray.get(outer.remote())

assert ray.get(via_closure.remote()) == 3      # an .options() copy inside a closure

@ray.remote
def use_handle(h, method):
    return ray.get(h.call.remote()) + ray.get(method.remote())

assert ray.get(use_handle.remote(c, c.call)) == 22   # a handle and a bound actor method
print("NESTED-OK")
'''


def _run(tmp_path, main: str) -> None:
    (tmp_path / "main.py").write_text(main)
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    proc = subprocess.run([sys.executable, str(tmp_path / "main.py")], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "NESTED-OK" in proc.stdout


@pytest.mark.parametrize("where", ["__main__", "module"])
def test_called_remote_function_is_captured_by_another(tmp_path, where):
    init = "ray.init(num_cpus=2)\n"
    if where == "__main__":
        main = MODULE + init + CHECKS
    else:
        (tmp_path / "nestmod.py").write_text(MODULE)
        main = "import ember as ray\nfrom nestmod import small, outer, Caller\n" + init + CHECKS
    _run(tmp_path, textwrap.dedent(main))


NESTED_JOB = '''
import sys
sys.path.insert(0, sys.argv[1])  # the module's folder reaches workers only as a job path
import ember as ray
import helpers

ray.init(num_cpus=2, namespace="nested-ns")
counter = helpers.Counter.options(name="counter").remote()

@ray.remote
class Relay:
    def call(self, fn, x):
        return ray.get(helpers.apply.remote(fn, x))

@ray.remote
def outer(fn, x):
    return ray.get(helpers.apply.remote(fn, x)) + ray.get(Relay.remote().call.remote(fn, x))

@ray.remote
def lookup():
    return ray.get(helpers.bump_named.remote())

assert ray.get(outer.remote(helpers.double, 5)) == 20   # task -> task and task -> actor -> task
assert ray.get(Relay.remote().call.remote(helpers.double, 4)) == 8
assert ray.get(lookup.remote()) == 1                    # a nested task finds the job's named actor
print("NESTED-OK")
'''

HELPERS = '''
import ember as ray

def double(x):
    return 2 * x

@ray.remote
def apply(fn, x):
    return fn(x)

@ray.remote
class Counter:
    def __init__(self):
        self.n = 0
    def bump(self):
        self.n += 1
        return self.n

@ray.remote
def bump_named():
    return ray.get(ray.get_actor("counter").bump.remote())
'''


def test_nested_tasks_and_actors_belong_to_the_drivers_job(tmp_path):
    """Functions from a module that only the driver's sys.path reaches travel into tasks and
    actors that nested tasks and actors create; nested code sees the job's namespace."""
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "helpers.py").write_text(HELPERS)
    (tmp_path / "main.py").write_text(NESTED_JOB)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run([sys.executable, str(tmp_path / "main.py"), str(lib)], cwd="/",
                          env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "NESTED-OK" in proc.stdout


def test_module_level_remote_objects_pickle_by_reference():
    import cloudpickle

    blob = cloudpickle.dumps(module_level)
    assert len(blob) < 200 and b"module_level" in blob  # a reference, not the function's code
    assert cloudpickle.loads(blob) is module_level
    local = ember.remote(lambda: 3)
    copy = cloudpickle.loads(cloudpickle.dumps(local.options(num_cpus=2)))
    assert copy._options == {"num_cpus": 2}


@ember.remote
def module_level():
    return 5
