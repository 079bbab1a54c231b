"""The job manager's input checks (no cluster): package URIs, runtime_env fields, working
directories zipped with their limit; and the client's JobStatus/JobDetails as Ray's."""
from __future__ import annotations

import io
import zipfile

import pytest

from ember._tools import job_manager
from ember.job_submission import JobDetails, JobStatus, JobType


def test_package_uris():
    assert job_manager.package_key("gcs://_ray_pkg_abc.zip") == b"_ray_pkg_abc.zip"
    for bad in ("s3://bucket/x.zip", "gcs://x.tar", "gcs://a/b.zip", "_ray_pkg_abc.zip"):
        with pytest.raises(ValueError, match="expected an uploaded package"):
            job_manager.package_key(bad)


@pytest.mark.parametrize("env, match", [
    ({"pip": ["x"]}, r"runtime_env fields \['pip'\] are not supported"),
    ({"env_vars": {"A": 1}}, "env_vars'\\] must map strings to strings"),
    ({"working_dir": 3}, "working_dir'\\] must be a string"),
    ({"working_dir": "/no/such/dir"}, "is not a directory"),
    ("not a dict", "runtime_env must be a dict"),
])
def test_runtime_env_checks(env, match):
    with pytest.raises(ValueError, match=match):
        job_manager._check_runtime_env(env)


def test_working_dir_zipped_without_caches(tmp_path):
    (tmp_path / "a.py").write_text("print(1)")
    (tmp_path / "__pycache__").mkdir()
    (tmp_path / "__pycache__" / "a.pyc").write_bytes(b"x")
    payload, env_vars = job_manager._check_runtime_env({"working_dir": str(tmp_path), "env_vars": {"K": "V"}})
    assert zipfile.ZipFile(io.BytesIO(payload)).namelist() == ["a.py"] and env_vars == {"K": "V"}


def test_job_status_and_details_as_rays():
    assert JobStatus("STOPPED").is_terminal() and not JobStatus.RUNNING.is_terminal()
    assert str(JobStatus.SUCCEEDED) == "SUCCEEDED"
    d = JobDetails.from_json({"type": "SUBMISSION", "status": "RUNNING", "entrypoint": "x",
                              "submission_id": "s", "entrypoint_num_cpus": 1})
    assert d.type is JobType.SUBMISSION and d.status is JobStatus.RUNNING and d.extra == {"entrypoint_num_cpus": 1}
