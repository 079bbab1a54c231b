"""Runtime envs, the pure parts: validation, Ray's merge rule, canonical serialization and hash,
gitignore-style excludes, deterministic packaging and its size limit, upload-once, the node's
build-once state, and the raylet's per-env worker pool and lease queue."""
from __future__ import annotations

import asyncio
import io
import os
import zipfile

import pytest

from ember._private.runtime_env import packaging, setup_error_from, validation
from ember.runtime_env import RuntimeEnv, RuntimeEnvConfig
from ember_raylet.lease_queue import LeaseQueue, LeaseRequest
from ember_raylet.resources import NodeResources
from ember_raylet.runtime_env import OnceTable, SetupFailed, _Once
from ember_raylet.worker_pool import WorkerPool

# ------------------------------------------------------------------ validation


def test_unknown_and_unsupported_fields_are_named():
    with pytest.raises(ValueError, match=r"unknown field\(s\) \['colour'\]"):
        validation.validate({"env_vars": {}, "colour": 1})
    with pytest.raises(ValueError, match=r"\['conda'\] are not supported by Ember"):
        validation.validate({"conda": "env.yml"})
    with pytest.raises(ValueError, match="unknown field"):
        RuntimeEnv(workdir="/x")
    with pytest.raises(TypeError, match="must be a dict"):
        validation.validate(["env_vars"])  # type: ignore[arg-type]


def test_field_types_are_checked():
    with pytest.raises(TypeError, match=r"env_vars'\] must be a dict of str to str; 'A': 1"):
        validation.validate({"env_vars": {"A": 1}})
    with pytest.raises(TypeError, match="py_modules"):
        validation.validate({"py_modules": "mod"})
    with pytest.raises(ValueError, match="setup_timeout_seconds"):
        validation.validate({"config": {"setup_timeout_seconds": 0}})
    with pytest.raises(ValueError, match=r"unknown field\(s\) \['timeout'\]"):
        validation.validate({"config": {"timeout": 3}})
    with pytest.raises(ValueError, match="pip_version"):
        validation.validate({"pip": {"packages": ["a"], "pip_version": "==23"}})


def test_pip_forms_normalise_to_one_shape(tmp_path):
    req = tmp_path / "requirements.txt"
    req.write_text("# pinned\nalpha==1.0\n\nbeta  # why\n")
    default = {"pip_check": False, "pip_install_options": validation.DEFAULT_PIP_OPTIONS}
    assert validation.validate({"pip": ["alpha==1.0", "beta"]})["pip"] == {
        "packages": ["alpha==1.0", "beta"], **default}
    assert validation.validate({"pip": str(req)})["pip"]["packages"] == ["alpha==1.0", "beta"]
    got = validation.validate({"pip": {"packages": ["x"], "pip_install_options": ["--no-index"]}})
    assert got["pip"] == {"packages": ["x"], "pip_check": False, "pip_install_options": ["--no-index"]}
    with pytest.raises(ValueError, match="does not exist"):
        validation.validate({"pip": str(tmp_path / "missing.txt")})


def test_runtime_env_classes_are_dicts():
    env = RuntimeEnv(env_vars={"A": "1"}, config=RuntimeEnvConfig(setup_timeout_seconds=5))
    assert env == {"env_vars": {"A": "1"}, "config": {"setup_timeout_seconds": 5, "eager_install": True}}
    assert env.env_vars() == {"A": "1"} and not env.has_working_dir()
    assert RuntimeEnv.deserialize(env.serialize()) == env


def test_merge_overrides_fields_and_merges_env_vars_by_key():
    job = {"env_vars": {"A": "job", "B": "job"}, "working_dir": "gcs://_ray_pkg_1.zip",
           "pip": {"packages": ["x"]}}
    task = {"env_vars": {"B": "task", "C": "task"}, "pip": {"packages": ["y"]}}
    assert validation.merge(job, task) == {
        "env_vars": {"A": "job", "B": "task", "C": "task"}, "working_dir": "gcs://_ray_pkg_1.zip",
        "pip": {"packages": ["y"]}}
    assert validation.merge(job, {}) == job
    assert validation.merge(None, task) == task


def test_serialization_is_canonical_and_hashes_differ_per_env():
    a = validation.serialize({"env_vars": {"B": "2", "A": "1"}, "py_modules": ["m"]})
    b = validation.serialize({"py_modules": ["m"], "env_vars": {"A": "1", "B": "2"}})
    assert a == b and validation.deserialize(a)["env_vars"] == {"A": "1", "B": "2"}
    assert validation.env_hash(a) != validation.env_hash(validation.serialize({"env_vars": {"A": "1"}}))
    assert validation.serialize({}) == "" and validation.env_hash("") == ""


def test_setup_error_is_recognised_in_messages():
    assert setup_error_from("FAILED: RuntimeEnvSetupError: pip install x failed") == "pip install x failed"
    assert setup_error_from("no node has 8 GPUs") is None

# ------------------------------------------------------------------ excludes and packaging


@pytest.mark.parametrize("pattern, path, is_dir, out", [
    ("*.log", "a.log", False, True),
    ("*.log", "sub/deep/a.log", False, True),
    ("/data", "data", True, True),
    ("/data", "sub/data", True, False),
    ("build/", "x/build", True, True),
    ("build/", "build", False, False),
    ("docs/**/*.png", "docs/a/b/c.png", False, True),
    ("docs/**/*.png", "docs/c.png", False, True),
    ("a?.txt", "ab.txt", False, True),
    ("a?.txt", "a/b.txt", False, False),
])
def test_excludes_follow_gitignore_rules(pattern, path, is_dir, out):
    assert packaging.Excludes([pattern]).excluded(path, is_dir) is out


def test_negation_reincludes_and_last_match_wins():
    ex = packaging.Excludes(["*.bin", "!keep.bin", "# comment", ""])
    assert ex.excluded("x.bin", False) and not ex.excluded("keep.bin", False)


def _tree(root, files):
    for rel, data in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)


def test_zip_is_deterministic_and_leaves_excluded_files_out(tmp_path):
    files = {"main.py": b"x = 1\n", "pkg/util.py": b"y = 2\n", "big/blob.bin": b"0" * 100,
             "logs/run.log": b"noise"}
    _tree(tmp_path / "a", files)
    data = packaging.zip_directory(str(tmp_path / "a"), ["big/", "*.log"], 10**6)
    names = zipfile.ZipFile(io.BytesIO(data)).namelist()
    assert sorted(names) == ["main.py", "pkg/util.py"]
    os.utime(tmp_path / "a" / "main.py", (1, 1))  # mtimes do not change the content hash
    _tree(tmp_path / "b", files)
    again = packaging.zip_directory(str(tmp_path / "b"), ["big/", "*.log"], 10**6)
    assert packaging.uri_for(data) == packaging.uri_for(again)
    assert packaging.uri_for(data).startswith("gcs://_ray_pkg_")
    prefixed = packaging.zip_directory(str(tmp_path / "a"), ["big/", "*.log"], 10**6, prefix="mymod")
    assert sorted(zipfile.ZipFile(io.BytesIO(prefixed)).namelist()) == ["mymod/main.py", "mymod/pkg/util.py"]


def test_size_limit_is_a_clear_error(tmp_path):
    _tree(tmp_path, {"blob.bin": os.urandom(64 * 1024)})
    with pytest.raises(packaging.PackageTooLargeError, match=r"over the limit of 0\.0 MiB.*excludes"):
        packaging.zip_directory(str(tmp_path), [], 1024)
    assert packaging.zip_directory(str(tmp_path), ["*.bin"], 1024)  # excluded: fits


def test_uploader_zips_once_and_uploads_once(tmp_path):
    store: dict[str, bytes] = {}
    puts: list[str] = []

    def put(uri: str, data: bytes) -> None:
        puts.append(uri)
        store[uri] = data

    up = packaging.Uploader(lambda uri: uri in store, put, lambda: 10**6)
    _tree(tmp_path / "wd", {"a.py": b"A = 1\n"})
    uri = up.package(str(tmp_path / "wd"), [], module=False, what="working_dir")
    assert up.package(str(tmp_path / "wd"), [], module=False, what="working_dir") == uri
    fresh = packaging.Uploader(lambda uri: uri in store, put, lambda: 10**6)  # another driver
    assert fresh.package(str(tmp_path / "wd"), [], module=False, what="working_dir") == uri
    assert puts == [uri]
    assert up.package(uri, [], module=False, what="working_dir") == uri  # inherited URI
    with pytest.raises(ValueError, match="does not exist"):
        up.package(str(tmp_path / "nope"), [], module=False, what="working_dir")
    with pytest.raises(ValueError, match="remote URIs"):
        up.package("s3://bucket/x.zip", [], module=False, what="working_dir")

# ------------------------------------------------------------------ the node: build once


def test_once_table_builds_once_and_forgets_failures():
    t: OnceTable[str] = OnceTable()
    assert t.begin("k") is True
    assert t.begin("k") is False  # someone is building it
    t.failed("k", "boom")
    assert t.last_error["k"] == "boom" and t.begin("k") is True  # retried after a failure
    t.succeeded("k", "ctx")
    assert t.begin("k") is False and t.ready["k"] == "ctx"


def test_concurrent_requests_wait_for_one_build():
    builds = []

    async def main() -> list[str]:
        once: _Once[str] = _Once()

        async def build() -> str:
            builds.append(1)
            await asyncio.sleep(0.05)
            return "venv"

        got = await asyncio.gather(*(once.get("reqs", build) for _ in range(5)))
        got.append(await once.get("reqs", build))

        async def bad() -> str:
            raise SetupFailed("no such package")

        for _ in range(2):  # each caller sees the failure; nothing is cached
            with pytest.raises(SetupFailed, match="no such package"):
                await once.get("bad", bad)
        return got

    assert asyncio.run(main()) == ["venv"] * 6
    assert builds == [1]

# ------------------------------------------------------------------ the raylet's pool per env


def test_pool_never_hands_a_worker_of_another_env():
    pool = WorkerPool(num_prestart=1, max_starting=2, startup_timeout_s=30, idle_timeout_s=10,
                      clock=lambda: 0.0)
    pool.add_starting("plain")
    pool.add_starting("e1", env="envA")
    pool.registered("plain", 1)
    pool.registered("e1", 2)
    assert pool.idle_by_env() == {"": 1, "envA": 1}
    assert pool.take_idle((), "envB") is None
    assert pool.to_start(3, "envB") == 2 and pool.to_start(0, "envB") == 0  # no prestart per env
    w = pool.take_idle((), "envA")
    assert w is not None and w.worker_id == "e1"
    assert pool.take_idle((), "envA") is None
    plain = pool.take_idle(())
    assert plain is not None and plain.worker_id == "plain"


def test_lease_queue_grants_only_with_a_worker_of_the_request_env():
    q = LeaseQueue("local", NodeResources({"CPU": 4}), 10.0, lambda: 0.0)
    for i, env in enumerate(["", "envA", "envA", "envB"]):
        q.submit(LeaseRequest(bytes([i]), {"CPU": 1}, env=env))
    s = q.schedule({"envA": 1, "": 1})
    assert [g.request.lease_id for g in s.grants] == [b"\x00", b"\x01"]
    assert s.wanted_by_env == {"envA": 1, "envB": 1} and s.workers_wanted == 2
    assert [r.lease_id for r in q.drop_env("envB")] == [b"\x03"]
    assert len(q) == 1


def test_zip_files_upload_as_they_are_and_wheels_only_as_py_modules(tmp_path):
    store: dict[str, bytes] = {}
    up = packaging.Uploader(lambda uri: uri in store, store.__setitem__, lambda: 10**6)
    z = tmp_path / "app.zip"
    with zipfile.ZipFile(z, "w") as zf:
        zf.writestr("main.py", "X = 1\n")
    uri = up.package(str(z), [], module=False, what="working_dir")
    assert store[uri] == z.read_bytes() and uri.endswith(".zip")
    whl = tmp_path / "m-1.0-py3-none-any.whl"
    whl.write_bytes(z.read_bytes())
    assert up.package(str(whl), [], module=True, what="py_modules").endswith(".whl")
    with pytest.raises(ValueError, match="wheels go in py_modules"):
        up.package(str(whl), [], module=False, what="working_dir")
    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(ValueError, match="must be a directory or .zip file"):
        up.package(str(tmp_path / "notes.txt"), [], module=False, what="working_dir")


def test_py_modules_accepts_module_objects():
    import ember.runtime_env as mod

    got = validation.validate({"py_modules": [mod]})["py_modules"]
    assert got == [os.path.dirname(mod.__file__)]
