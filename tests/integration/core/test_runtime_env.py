"""Runtime envs on a real embedded cluster: env_vars, working_dir (with excludes and the size
limit), py_modules (a package directory and a wheel) and pip (a wheel built here, installed with
--no-index from a local directory: no internet) each proven by a task and an actor; workers
pooled per env; nested tasks inherit; failures (a missing directory, an unresolvable
requirement, a set-up timeout, an actor whose env fails) raise RuntimeEnvSetupError and the
cluster carries on."""
from __future__ import annotations

import dataclasses
import glob
import os
import socket
import subprocess
import sys
import zipfile

import pytest

import ember
from ember import exceptions as exc
from ember.runtime_env import RuntimeEnv


def make_wheel(dist_dir: str, name: str = "tinypkg", version: str = "1.0", value: str = "42") -> str:
    """A one-module pure-Python wheel, written as a zip (no build tools, no network)."""
    os.makedirs(dist_dir, exist_ok=True)
    path = os.path.join(dist_dir, f"{name}-{version}-py3-none-any.whl")
    info = f"{name}-{version}.dist-info"
    files = {
        f"{name}/__init__.py": f"VALUE = {value}\n",
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = "".join(f"{p},,\n" for p in files) + f"{info}/RECORD,,\n"
    with zipfile.ZipFile(path, "w") as zf:
        for p, text in files.items():
            zf.writestr(p, text)
        zf.writestr(f"{info}/RECORD", record)
    return path


@pytest.fixture(scope="module")
def cluster():
    ember.init(num_cpus=2, object_store_memory=128 * 2**20)
    yield ember
    ember.shutdown()


@ember.remote
def probe(name: str = "EMBER_TEST_RENV") -> dict:
    return {"pid": os.getpid(), "var": os.environ.get(name), "cwd": os.getcwd(),
            "python": sys.executable}


@ember.remote
class Probe:
    def env(self, name: str) -> str | None:
        return os.environ.get(name)

    def read(self, rel: str) -> str:
        with open(rel) as f:
            return f.read()

    def imported(self, module: str) -> object:
        import importlib

        return importlib.import_module(module).VALUE

    def python(self) -> str:
        return sys.executable


@ember.remote
def env_in_context() -> dict:
    return dict(ember.get_runtime_context().runtime_env)


@ember.remote
def read_file(rel: str) -> str | None:
    return open(rel).read() if os.path.exists(rel) else None


@ember.remote
def import_value(module: str) -> object:
    import importlib

    return importlib.import_module(module).VALUE


def test_env_vars_task_and_actor(cluster):
    env = {"env_vars": {"EMBER_TEST_RENV": "task-value"}}
    assert ember.get(probe.options(runtime_env=env).remote())["var"] == "task-value"
    a = Probe.options(runtime_env=RuntimeEnv(env_vars={"EMBER_TEST_RENV": "actor-value"})).remote()
    assert ember.get(a.env.remote("EMBER_TEST_RENV")) == "actor-value"
    assert ember.get(probe.remote())["var"] is None  # no env: a plain worker
    ctx_env = ember.get(env_in_context.options(runtime_env=env).remote())
    assert ctx_env == {"env_vars": {"EMBER_TEST_RENV": "task-value"}}


def test_workers_are_pooled_per_env(cluster):
    same = probe.options(runtime_env={"env_vars": {"EMBER_TEST_RENV": "pool"}})
    first = ember.get(same.remote())["pid"]
    assert ember.get(same.remote())["pid"] == first  # the idle worker of the env is reused
    other = ember.get(probe.options(runtime_env={"env_vars": {"EMBER_TEST_RENV": "x"}}).remote())
    plain = ember.get([probe.remote() for _ in range(4)])
    assert other["pid"] != first and other["var"] == "x"
    assert first not in {p["pid"] for p in plain} and other["pid"] not in {p["pid"] for p in plain}


def test_working_dir_task_and_actor_with_excludes(cluster, tmp_path):
    wd = tmp_path / "app"
    (wd / "data").mkdir(parents=True)
    (wd / "data" / "input.txt").write_text("hello")
    (wd / "helper_mod_wd.py").write_text("VALUE = 'from working_dir'\n")
    (wd / "secret.key").write_text("do not ship")
    env = {"working_dir": str(wd), "excludes": ["*.key"]}
    f = read_file.options(runtime_env=env)
    assert ember.get(f.remote("data/input.txt")) == "hello"
    assert ember.get(f.remote("secret.key")) is None  # excluded from the package
    assert ember.get(import_value.options(runtime_env=env).remote("helper_mod_wd")) == "from working_dir"
    a = Probe.options(runtime_env=env).remote()
    assert ember.get(a.read.remote("data/input.txt")) == "hello"
    assert ember.get(a.imported.remote("helper_mod_wd")) == "from working_dir"
    cwd = ember.get(probe.options(runtime_env=env).remote())["cwd"]
    assert "runtime_resources" in cwd and "_ray_pkg_" in cwd


def test_py_modules_directory_and_wheel(cluster, tmp_path):
    pkg = tmp_path / "src" / "renv_dirmod"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("VALUE = 'dir module'\n")
    wheel = make_wheel(str(tmp_path / "dist"), name="renv_wheelmod", value="'wheel module'")
    env = {"py_modules": [str(pkg), wheel]}
    assert ember.get(import_value.options(runtime_env=env).remote("renv_dirmod")) == "dir module"
    assert ember.get(import_value.options(runtime_env=env).remote("renv_wheelmod")) == "wheel module"
    a = Probe.options(runtime_env=env).remote()
    assert ember.get(a.imported.remote("renv_wheelmod")) == "wheel module"


def test_pip_local_wheel_task_and_actor_share_one_venv(cluster, tmp_path):
    dist = str(tmp_path / "dist")
    make_wheel(dist, name="renv_tinypkg", value="1234")
    pip = {"packages": ["renv_tinypkg==1.0"],
           "pip_install_options": ["--no-index", "--find-links", dist]}
    env = {"pip": pip}
    # the same requirement set under two envs (env_vars differ), requested at once by a task
    # and an actor: one virtualenv is built, both wait for it
    other = {"pip": pip, "env_vars": {"EMBER_TEST_RENV": "v"}}
    ref = import_value.options(runtime_env=env).remote("renv_tinypkg")
    a = Probe.options(runtime_env=other).remote()
    assert ember.get(a.imported.remote("renv_tinypkg")) == 1234
    assert ember.get(ref) == 1234
    python = ember.get(a.python.remote())
    assert "/runtime_resources/pip/" in python
    venvs = glob.glob(os.path.join(python.split("/pip/")[0], "pip", "*", ".ember-ready"))
    assert len(venvs) == 1
    assert ember.get(a.env.remote("EMBER_TEST_RENV")) == "v"
    with pytest.raises(ModuleNotFoundError):  # the base workers do not have it
        ember.get(import_value.remote("renv_tinypkg"))


def test_missing_working_dir_fails_in_the_caller(cluster, tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        probe.options(runtime_env={"working_dir": str(tmp_path / "nope")}).remote()
    with pytest.raises(ValueError, match="does not exist"):
        Probe.options(runtime_env={"py_modules": [str(tmp_path / "nope")]}).remote()
    with pytest.raises(ValueError, match="unknown field"):
        probe.options(runtime_env={"working_directory": "."})


def test_size_limit_is_enforced(cluster, tmp_path, monkeypatch):
    from ember_common import config

    (tmp_path / "blob.bin").write_bytes(os.urandom(256 * 1024))
    monkeypatch.setattr(config, "_config",
                        dataclasses.replace(config.get_config(), runtime_env_max_package_bytes=64 * 1024))
    with pytest.raises(ValueError, match=r"over the limit of 0\.1 MiB"):
        probe.options(runtime_env={"working_dir": str(tmp_path)}).remote()
    ref = probe.options(runtime_env={"working_dir": str(tmp_path), "excludes": ["*.bin"]}).remote()
    assert ember.get(ref)["cwd"] != os.getcwd()


def test_unresolvable_requirement_fails_with_pip_output_then_good_tasks_run(cluster, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    bad = {"pip": {"packages": ["renv-no-such-package==9.9"],
                   "pip_install_options": ["--no-index", "--find-links", str(empty)]}}
    with pytest.raises(exc.RuntimeEnvSetupError, match="(?s)pip install.*No matching distribution"):
        ember.get(probe.options(runtime_env=bad).remote(), timeout=120)
    a = Probe.options(runtime_env=bad).remote()
    with pytest.raises(exc.RayActorError) as info:
        ember.get(a.env.remote("X"), timeout=120)
    assert isinstance(info.value.cause, exc.RuntimeEnvSetupError)
    assert "No matching distribution" in str(info.value.cause)
    assert ember.get(probe.remote(), timeout=60)["var"] is None  # the cluster carries on
    status = subprocess.run([os.path.join(os.path.dirname(sys.executable), "ember"), "status",
                             "--address", ember.get_runtime_context().gcs_address],
                            capture_output=True, text=True, timeout=60)
    assert "Runtime env set-up failures" in status.stdout, status.stdout + status.stderr
    assert "pip install renv-no-such-package==9.9 failed" in status.stdout


def test_setup_timeout_fails_the_task(cluster):
    # pip fetches its index from a local server that accepts and never answers: the set-up
    # runs into config.setup_timeout_seconds (no internet involved).
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen(8)
        url = f"http://127.0.0.1:{srv.getsockname()[1]}/"
        env = {"pip": {"packages": ["renv_hangs==1.0"],
                       "pip_install_options": ["--no-index", "--find-links", url, "--timeout", "60"]},
               "config": {"setup_timeout_seconds": 3}}
        with pytest.raises(exc.RuntimeEnvSetupError, match=r"timed out after 3s"):
            ember.get(probe.options(runtime_env=env).remote(), timeout=60)
    assert ember.get(probe.remote(), timeout=60)["pid"] > 0


@ember.remote
def parent_task() -> tuple:
    inherit = ember.get(probe.remote("EMBER_TEST_RENV_A"))["var"]
    child = probe.options(runtime_env={"env_vars": {"EMBER_TEST_RENV_B": "child"}})
    merged = ember.get(child.remote("EMBER_TEST_RENV_A"))["var"]
    own = ember.get(child.remote("EMBER_TEST_RENV_B"))["var"]
    a = Probe.remote()
    return inherit, merged, own, ember.get(a.env.remote("EMBER_TEST_RENV_A"))


def test_nested_tasks_and_actors_inherit_the_parent_env(cluster):
    env = {"env_vars": {"EMBER_TEST_RENV_A": "parent"}}
    assert ember.get(parent_task.options(runtime_env=env).remote(), timeout=120) == (
        "parent", "parent", "child", "parent")


def test_env_whose_workers_cannot_start_fails_instead_of_respawning(cluster):
    broken = {"env_vars": {"PYTHONHOME": "/nonexistent-python-home"}}  # the interpreter cannot start
    with pytest.raises(exc.RuntimeEnvSetupError, match="exited before registering"):
        ember.get(probe.options(runtime_env=broken).remote(), timeout=120)
    assert ember.get(probe.remote(), timeout=60)["pid"] > 0


def test_crafted_working_dir_zips_are_refused_and_the_cluster_carries_on(cluster, tmp_path):
    bomb = tmp_path / "bomb.zip"
    with zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("zeros.bin", bytes(64 * 2**20))  # a few tens of KiB zipped
    with pytest.raises(exc.RuntimeEnvSetupError, match=r"expands more than 200x .*compression ratio"):
        ember.get(probe.options(runtime_env={"working_dir": str(bomb)}).remote(), timeout=120)
    link = tmp_path / "link.zip"
    with zipfile.ZipFile(link, "w") as zf:
        info = zipfile.ZipInfo("passwd")
        info.external_attr = (0o120777) << 16  # a symlink entry, as `zip -y` writes one
        zf.writestr(info, "/etc/passwd")
    with pytest.raises(exc.RuntimeEnvSetupError, match=r"entry 'passwd' is a symlink"):
        ember.get(probe.options(runtime_env={"working_dir": str(link)}).remote(), timeout=120)
    with pytest.raises(ValueError, match=r"'--report=.*' is a pip option"):
        probe.options(runtime_env={"pip": [f"--report={tmp_path / 'r.json'}"]}).remote()
    assert ember.get(probe.remote(), timeout=60)["var"] is None  # the cluster carries on
    (tmp_path / "ok").mkdir()
    (tmp_path / "ok" / "note.txt").write_text("fine")
    ref = probe.options(runtime_env={"working_dir": str(tmp_path / "ok")}).remote()
    assert os.path.exists(os.path.join(ember.get(ref, timeout=120)["cwd"], "note.txt"))


def test_workers_run_without_core_dumps(cluster):
    import resource

    @ember.remote
    def core_limit() -> tuple:
        return resource.getrlimit(resource.RLIMIT_CORE)

    assert ember.get(core_limit.remote(), timeout=60) == (0, 0)
    import psutil

    services = []  # (argv, core limit) of each live service the embedded cluster started
    for p in psutil.Process().children(recursive=True):
        try:  # a worker that exits (or turns zombie) while we look is not a service
            argv = p.cmdline()[:3]
            if any("ember_" in a for a in argv):
                services.append((argv, p.rlimit(psutil.RLIMIT_CORE)))
        except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
            continue
    names = {a.split(".")[0] for argv, _ in services for a in argv if a.startswith("ember_")}
    assert {"ember_gcs", "ember_raylet"} <= names, names
    for argv, limit in services:  # gcs, raylet, objmgr, ...
        assert limit == (0, 0), argv
