"""Options and arguments Ray 2.60 rejects are rejected, with Ray's exception type and a message
naming the option (compatibility issue 46, item 10); the cluster keeps working after each."""
from __future__ import annotations

import subprocess
import sys

import pytest

import ember as ray


@pytest.fixture(scope="module")
def cluster():
    ray.init(num_cpus=1)
    yield
    ray.shutdown()


@ray.remote
def f():
    return 1


@ray.remote
class A:
    def m(self):
        return 1


# (what, options, Ray's exception type, a word the message must hold), each checked against
# Ray 2.60's own `.options()`.
CASES = [
    ("task", {"num_cpus": -1}, ValueError, "num_cpus"),
    ("task", {"num_gpus": -1}, ValueError, "num_gpus"),
    ("task", {"memory": -1}, ValueError, "memory"),
    ("task", {"num_cpus": "1"}, TypeError, "num_cpus"),
    ("task", {"num_returns": -1}, ValueError, "num_returns"),
    ("task", {"max_retries": -2}, ValueError, "max_retries"),
    ("task", {"max_retries": 1.5}, TypeError, "max_retries"),
    ("task", {"scheduling_strategy": 5}, TypeError, "scheduling_strategy"),
    ("task", {"bogus_option": 1}, ValueError, "bogus_option"),
    ("task", {"max_restarts": 1}, ValueError, "max_restarts"),
    ("task", {"resources": {"CPU": 1}}, ValueError, "num_cpus"),
    ("task", {"resources": {"x": -1}}, ValueError, "x"),
    ("task", {"retry_exceptions": "x"}, TypeError, "retry_exceptions"),
    ("task", {"name": 5}, TypeError, "name"),
    ("task", {"runtime_env": 5}, TypeError, "runtime_env"),
    ("actor", {"name": 5}, TypeError, "name"),
    ("actor", {"num_cpus": -1}, ValueError, "num_cpus"),
    ("actor", {"max_restarts": -2}, ValueError, "max_restarts"),
    ("actor", {"max_restarts": 1.5}, TypeError, "max_restarts"),
    ("actor", {"max_task_retries": -2}, ValueError, "max_task_retries"),
    ("actor", {"max_task_retries": 1.5}, TypeError, "max_task_retries"),
    ("actor", {"lifetime": "forever"}, ValueError, "lifetime"),
    ("actor", {"bogus_option": 1}, ValueError, "bogus_option"),
    ("actor", {"max_retries": 1}, ValueError, "max_retries"),
    ("actor", {"num_returns": 1}, ValueError, "num_returns"),
    ("actor", {"get_if_exists": True}, ValueError, "get_if_exists"),
]


@pytest.mark.parametrize("what,options,error,word", CASES,
                         ids=[f"{w}-{next(iter(o))}={next(iter(o.values()))!r}" for w, o, _, _ in CASES])
def test_bad_options_are_rejected_as_ray_rejects_them(cluster, what, options, error, word):
    target = f if what == "task" else A
    with pytest.raises(error, match=word):
        target.options(**options)
    assert ray.get(f.remote(), timeout=60) == 1  # the cluster keeps working


INIT_CASES = [
    ("num_cpus=-1", "ValueError", "CPU"),
    ("num_gpus=-1", "ValueError", "GPU"),
    ("namespace=5", "TypeError", "namespace"),
    ("resources={'CPU': 1}", "ValueError", "num_cpus"),
    ("bogus=1", "RuntimeError", "bogus"),
    # Ray's private/extra arguments Ember cannot honour: refused naming them, never dropped.
    ("local_mode=True", "ValueError", "local_mode"),
    ("_system_config={'object_spilling_threshold': 0.5}", "ValueError", "_system_config"),
    ("_temp_dir='/nonexistent/ember-elsewhere'", "ValueError", "_temp_dir"),
    ("job_config={'metadata': {'team': 'a'}}", "ValueError", "metadata"),
    ("job_config={'bogus': 1}", "ValueError", "bogus"),
    ("runtime_env={'env_vars': {'A': '1'}}, job_config={'runtime_env': {'env_vars': {'B': '1'}}}",
     "ValueError", "runtime_env"),
    ("include_dashboard=False, dashboard_port=0", "ValueError", "dashboard_port"),
    ("_node_ip_address='10.1.2.3'", "ValueError", "_node_ip_address"),
]


def test_bad_init_arguments_are_rejected_as_ray_rejects_them():
    code = "import ember\n" + "".join(
        f"try:\n    ember.init({args})\n    print('ACCEPTED', {args!r})\n"
        f"except Exception as e:\n    print(type(e).__mro__[0].__name__, [c.__name__ for c in type(e).__mro__], e)\n"
        for args, _, _ in INIT_CASES)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    lines = [ln for ln in out.stdout.splitlines() if ln.strip()]
    assert len(lines) == len(INIT_CASES), out.stdout + out.stderr
    for (args, error, word), line in zip(INIT_CASES, lines, strict=True):
        assert "ACCEPTED" not in line, line
        assert f"'{error}'" in line and word in line, (args, line)


def test_init_honours_job_config_and_the_extras_it_implements():
    """job_config's runtime_env and ray_namespace (a dict, or an object with JobConfig's
    attributes) apply to the job; local_mode=False, _temp_dir naming the current temp root and
    dashboard_port without include_dashboard (which starts the dashboard, as in Ray) are taken."""
    code = """
import types, urllib.request
import ember
from ember._private import node
jc = types.SimpleNamespace(runtime_env={'env_vars': {'EMBER_JC_TEST': 'from-job-config'}},
                           ray_namespace='jc-ns', metadata={})
ctx = ember.init(num_cpus=1, job_config=jc, local_mode=False, _temp_dir=node.EMBER_TMP, dashboard_port=0)
@ember.remote
def env():
    import os
    return os.environ.get('EMBER_JC_TEST')
print('ENV', ember.get(env.remote(), timeout=60))
print('NS', ember.get_runtime_context().namespace)
from ember_common import auth
req = urllib.request.Request(ctx['dashboard_url'], headers=auth.http_headers())
print('DASH', urllib.request.urlopen(req, timeout=30).status)
ember.shutdown()
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "ENV from-job-config" in out.stdout and "NS jc-ns" in out.stdout, out.stdout
    assert "DASH 200" in out.stdout, out.stdout + out.stderr


def test_init_connecting_refuses_arguments_that_describe_a_new_cluster(cluster):
    """A driver joining a running cluster cannot start its dashboard or metrics ports: given,
    they raise ValueError naming them (not dropped)."""
    from ember._private.worker import global_worker

    address = global_worker().core.gcs_address
    code = "import ember\n" + "".join(
        f"try:\n    ember.init(address={address!r}, {args})\n    print('ACCEPTED', {args!r})\n    ember.shutdown()\n"
        f"except ValueError as e:\n    print('ValueError', e)\n"
        for args in ("include_dashboard=True", "dashboard_port=0", "_metrics_export_port=9100"))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    lines = [ln for ln in out.stdout.splitlines() if ln.strip()]
    assert len(lines) == 3, out.stdout + out.stderr
    for word, line in zip(("include_dashboard", "dashboard_port", "_metrics_export_port"), lines, strict=True):
        assert line.startswith("ValueError") and word in line, line
    assert ray.get(f.remote(), timeout=60) == 1
