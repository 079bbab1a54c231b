"""`ember.init(logging_config=ember.LoggingConfig(...))` sets the root logger of the driver and of
every worker of the job, with the context of the call that logged (Ray's ray.LoggingConfig)."""
from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

DRIVER = """
import logging, sys, time
import ember as ray

ray.init(num_cpus=1, logging_config=ray.LoggingConfig(
    encoding=sys.argv[1], log_level=sys.argv[2], additional_log_standard_attrs=["name"]))
log = logging.getLogger("mine")
log.info("from driver")
log.debug("debug from driver")

@ray.remote
def f():
    logging.getLogger("mine").info("from task", extra={"user_key": 7})
    logging.getLogger("mine").debug("debug from task")
    return ray.get_runtime_context().get_task_id()

@ray.remote
class A:
    def m(self):
        logging.getLogger("mine").warning("from actor")
        return ray.get_runtime_context().get_actor_id()

ctx = ray.get_runtime_context()
print("IDS", ctx.get_job_id(), ctx.get_node_id(), ray.get(f.remote()), ray.get(A.remote().m.remote()), flush=True)
time.sleep(1.5)  # the workers' lines reach this console through the log monitor
ray.shutdown()
"""


def _run(encoding: str, level: str) -> tuple[dict[str, str], list[str]]:
    out = subprocess.run([sys.executable, "-c", DRIVER, encoding, level], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = (out.stdout + out.stderr).splitlines()
    job, node, task, actor = next(ln.split()[1:] for ln in lines if ln.startswith("IDS "))
    return {"job": job, "node": node, "task": task, "actor": actor}, lines


def _json_line(lines: list[str], message: str) -> dict:
    """The JSON record with this message (a worker's line comes after its `(f pid=...)` prefix)."""
    for ln in lines:
        body = ln[ln.index("{"):] if "{" in ln else ""
        if f'"message": "{message}"' in body:
            return json.loads(body)
    raise AssertionError(f"no JSON record {message!r} in:\n" + "\n".join(lines))


def test_json_records_carry_the_context_of_the_call_that_logged():
    ids, lines = _run("JSON", "INFO")
    driver = _json_line(lines, "from driver")
    assert driver["levelname"] == "INFO" and driver["name"] == "mine" and driver["filename"] == "<string>"
    assert driver["job_id"] == ids["job"] and driver["node_id"] == ids["node"] and driver["worker_id"]
    assert "task_id" not in driver and "actor_id" not in driver  # a driver runs no task
    task = _json_line(lines, "from task")
    assert task["task_id"] == ids["task"] and task["task_name"] == "f" and task["task_func_name"] == "__main__.f"
    assert task["job_id"] == ids["job"] and task["user_key"] == 7 and task["worker_id"] != driver["worker_id"]
    assert isinstance(task["timestamp_ns"], int) and "actor_id" not in task
    actor = _json_line(lines, "from actor")
    assert actor["levelname"] == "WARNING" and actor["actor_id"] == ids["actor"] and actor["task_name"] == "A.m"
    assert not any("debug from" in ln for ln in lines), "INFO drops DEBUG records in driver and workers"


def test_text_lines_and_the_level_apply_in_the_workers():
    ids, lines = _run("TEXT", "DEBUG")
    task = next(ln for ln in lines if "-- from task" in ln)
    assert re.search(r"\tINFO <string>:\d+ -- from task name=mine job_id=", task), task
    assert f"task_id={ids['task']} task_name=f task_func_name=__main__.f user_key=7 timestamp_ns=" in task
    assert any("DEBUG <string>" in ln and "-- debug from task" in ln for ln in lines)
    assert any("-- debug from driver" in ln and f"job_id={ids['job']}" in ln for ln in lines)


@pytest.mark.parametrize("kwargs, message", [
    ({"encoding": "XML"}, "invalid encoding 'XML'"),
    ({"log_level": "LOUD"}, "invalid log_level 'LOUD'"),
    ({"additional_log_standard_attrs": ["name", "bogus"]}, "'bogus' in additional_log_standard_attrs"),
])
def test_a_bad_config_is_refused_naming_the_field(kwargs, message):
    import ember

    with pytest.raises(ValueError, match=re.escape(message)):
        ember.LoggingConfig(**kwargs)


def test_init_refuses_what_is_not_a_logging_config():
    code = ("import ember\ntry:\n    ember.init(num_cpus=1, logging_config={'encoding': 'JSON'})\n"
            "except TypeError as e:\n    print('REFUSED', e)\nprint('RUNNING', ember.is_initialized())\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60).stdout
    assert "REFUSED logging_config must be an ember.LoggingConfig, got dict" in out and "RUNNING False" in out
