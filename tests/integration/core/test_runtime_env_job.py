"""The job's runtime env (`ember.init(runtime_env=...)`): every task and actor of the job runs
in it; a task's own env overrides it field by field, env_vars merged key by key (Ray's rule)."""
from __future__ import annotations

import os

import pytest

import ember


def test_a_bad_job_env_fails_init_and_leaves_nothing_running(tmp_path):
    with pytest.raises(ValueError, match="unknown field"):
        ember.init(num_cpus=1, runtime_env={"workdir": str(tmp_path)})
    with pytest.raises(ValueError, match="does not exist"):
        ember.init(num_cpus=1, runtime_env={"working_dir": str(tmp_path / "missing")})
    assert not ember.is_initialized()


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    wd = tmp_path_factory.mktemp("jobdir")
    (wd / "job_mod_renv.py").write_text("VALUE = 'job working_dir'\n")
    ember.init(num_cpus=2, object_store_memory=128 * 2**20,
               runtime_env={"env_vars": {"EMBER_TEST_JOB": "job", "EMBER_TEST_BOTH": "job"},
                            "working_dir": str(wd)})
    yield wd
    ember.shutdown()


@ember.remote
def env_of(*names: str) -> list:
    return [os.environ.get(n) for n in names]


@ember.remote
def job_module() -> str:
    import job_mod_renv

    return job_mod_renv.VALUE


@ember.remote
class Reader:
    def env(self, name: str) -> str | None:
        return os.environ.get(name)

    def cwd(self) -> str:
        return os.getcwd()


def test_tasks_and_actors_run_in_the_job_env(job):
    assert ember.get(env_of.remote("EMBER_TEST_JOB")) == ["job"]
    assert ember.get(job_module.remote()) == "job working_dir"
    a = Reader.remote()
    assert ember.get(a.env.remote("EMBER_TEST_JOB")) == "job"
    assert "_ray_pkg_" in ember.get(a.cwd.remote())


def test_task_env_merges_over_the_job_env(job, tmp_path):
    f = env_of.options(runtime_env={"env_vars": {"EMBER_TEST_BOTH": "task", "EMBER_TEST_TASK": "t"}})
    assert ember.get(f.remote("EMBER_TEST_JOB", "EMBER_TEST_BOTH", "EMBER_TEST_TASK")) == ["job", "task", "t"]
    # the task's working_dir replaces the job's (fields other than env_vars are overridden)
    (tmp_path / "job_mod_renv.py").write_text("VALUE = 'task working_dir'\n")
    g = job_module.options(runtime_env={"working_dir": str(tmp_path)})
    assert ember.get(g.remote()) == "task working_dir"
    assert ember.get(job_module.remote()) == "job working_dir"
