"""Tuner.restore after the driver process is really killed (SIGKILL) mid-run: the restored run
finishes the remaining trials, resumes interrupted ones from their checkpoints, and does not run
again any trial the saved state had as finished. Also resume_errored / restart_errored, and one
OpenTelemetry span per trial."""
from __future__ import annotations

import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time

import psutil
import pytest

import ember
from ember import tune
from ember.tune._internal import experiment_state as es

NUM_TRIALS = 8

TRAINABLE = textwrap.dedent("""
    import os, sys, time
    import ember
    from ember import tune

    LOG = os.environ["TUNE_TEST_LOG"]

    def log(line):
        with open(LOG, "a") as f:
            f.write(line + "\\n")

    def slow_steps(config):
        ckpt = tune.get_checkpoint()
        step = ckpt.to_dict()["step"] if ckpt else 0
        tid = tune.get_context().get_trial_id()
        log(f"start {tid} {step}")
        while step < 6:
            step += 1
            time.sleep(0.3)  # long enough that saved states catch trials halfway, even under load
            tune.report({"loss": config["x"] / step, "step": step},
                        checkpoint=tune.Checkpoint.from_dict({"step": step}))
        log(f"done {tid}")
""")

FIRST_RUN = TRAINABLE + textwrap.dedent("""
    ember.init(num_cpus=2)
    tune.Tuner(slow_steps, param_space={"x": tune.uniform(0, 1)},
               tune_config=tune.TuneConfig(metric="loss", mode="min", num_samples=%d, max_concurrent_trials=2),
               run_config=tune.RunConfig(storage_path=sys.argv[1], name="exp", verbose=0)).fit()
    print("FINISHED WITHOUT BEING KILLED", flush=True)
""" % NUM_TRIALS)

RESTORE = TRAINABLE + textwrap.dedent("""
    import json
    ember.init(num_cpus=2)
    path = sys.argv[1] + "/exp"
    assert tune.Tuner.can_restore(path)
    results = tune.Tuner.restore(path, trainable=slow_steps).fit()
    print("RESULT " + json.dumps({"n": len(results), "terminated": results.num_terminated,
                                  "errors": results.num_errors,
                                  "steps": sorted(r.metrics["step"] for r in results)}), flush=True)
""")


def _read_state(exp):
    try:
        return es.load_experiment_state(__import__("pyarrow.fs").fs.LocalFileSystem(), str(exp))
    except (FileNotFoundError, EOFError, OSError):
        return None


def _kill_tree(proc):
    """SIGKILL the driver first (the point of the test), then whatever it started."""
    try:
        children = psutil.Process(proc.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        children = []
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)
    for c in children:
        try:
            c.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(children, timeout=10)
    for d in glob.glob(f"/dev/shm/ember-store-{os.geteuid()}/session_*_{proc.pid}_*"):
        shutil.rmtree(d, ignore_errors=True)


@pytest.mark.timeout(600)
def test_restore_after_killing_the_driver_finishes_without_rerunning(tmp_path):
    log = tmp_path / "log.txt"
    env = dict(os.environ, TUNE_TEST_LOG=str(log))
    script1, script2 = tmp_path / "first.py", tmp_path / "restore.py"
    script1.write_text(FIRST_RUN)
    script2.write_text(RESTORE)
    proc = subprocess.Popen([sys.executable, str(script1), str(tmp_path)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    exp = tmp_path / "exp"
    try:
        deadline = time.monotonic() + 150
        while time.monotonic() < deadline:
            state = _read_state(exp)
            done = sum(t.status == "TERMINATED" for t in state["trials"]) if state else 0
            mid_run = state and any(t.status != "TERMINATED" and t.checkpoint is not None for t in state["trials"])
            if 2 <= done <= NUM_TRIALS - 3 and mid_run:  # kill with trials finished and some halfway
                break
            assert proc.poll() is None, proc.stdout.read()[-3000:]
            time.sleep(0.1)
        else:
            pytest.fail("the first run never saved two finished trials and one halfway")
    except BaseException:
        _kill_tree(proc)
        proc.stdout.close()  # (not left to the collector: a ResourceWarning in the next test)
        raise
    _kill_tree(proc)
    out = proc.stdout.read()
    proc.stdout.close()
    assert "FINISHED WITHOUT BEING KILLED" not in out
    state = _read_state(exp)  # the last state the killed driver wrote
    finished = {t.trial_id for t in state["trials"] if t.status == "TERMINATED"}
    assert finished and len(finished) < NUM_TRIALS
    lines_before = log.read_text().splitlines()

    r = subprocess.run([sys.executable, str(script2), str(tmp_path)], env=env, capture_output=True,
                       text=True, timeout=240)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    result = json.loads(next(x for x in r.stdout.splitlines() if x.startswith("RESULT "))[7:])
    assert result == {"n": NUM_TRIALS, "terminated": NUM_TRIALS, "errors": 0, "steps": [6] * NUM_TRIALS}
    after = log.read_text().splitlines()[len(lines_before):]
    restarted = {line.split()[1] for line in after if line.startswith("start")}
    assert not restarted & finished, f"finished trials ran again: {restarted & finished}"
    # trials interrupted with a checkpoint resumed from it (at least that step), not from step 0
    resumed_from = {line.split()[1]: int(line.split()[2]) for line in after if line.startswith("start")}
    halfway = {t.trial_id: t.checkpoints[-1][1]["step"] for t in state["trials"]
               if t.status != "TERMINATED" and t.checkpoint is not None}
    assert halfway and all(resumed_from[t] >= step for t, step in halfway.items()), (halfway, resumed_from)
    ran_in_total = {line.split()[1] for line in log.read_text().splitlines() if line.startswith("done")}
    assert len(ran_in_total) == NUM_TRIALS


@pytest.fixture(scope="module")
def cluster():
    ember.init(num_cpus=2, object_store_memory=128 * 2**20)
    yield
    ember.shutdown()


def _errs_once(config):
    ckpt = tune.get_checkpoint()
    start = ckpt.to_dict()["step"] if ckpt else 0
    for step in range(start + 1, 4):
        tune.report({"step": step, "start": start}, checkpoint=tune.Checkpoint.from_dict({"step": step}))
        if config["x"] == 1 and step == 2 and not os.path.exists(config["fixed"]):
            raise RuntimeError("not yet")


@pytest.mark.parametrize("mode", ["resume_errored", "restart_errored"])
def test_restore_resumes_or_restarts_errored_trials(cluster, tmp_path, mode):
    fixed = str(tmp_path / "fixed")
    space = {"x": tune.grid_search([0, 1]), "fixed": fixed}
    results = tune.Tuner(_errs_once, param_space=space,
                         run_config=tune.RunConfig(storage_path=str(tmp_path), name="e", verbose=0)).fit()
    assert results.num_errors == 1
    open(fixed, "w").close()
    assert tune.Tuner.restore(str(tmp_path / "e"), _errs_once).get_results().num_errors == 1
    again = tune.Tuner.restore(str(tmp_path / "e"), _errs_once, **{mode: True}).fit()
    assert again.num_errors == 0 and again.num_terminated == 2
    fixed_trial = [r for r in again if r.config["x"] == 1][0]
    assert fixed_trial.metrics["step"] == 3
    assert fixed_trial.metrics["start"] == (2 if mode == "resume_errored" else 0)
    untouched = tune.Tuner.restore(str(tmp_path / "e"), _errs_once).fit()  # nothing left to run
    assert untouched.num_terminated == 2


def test_restore_of_a_missing_experiment_fails_clearly(tmp_path):
    with pytest.raises(ValueError, match="cannot restore"):
        tune.Tuner.restore(str(tmp_path / "nothing"), _errs_once)


def test_one_span_per_trial(tmp_path):
    span_dir = tmp_path / "spans"
    span_dir.mkdir()
    driver = textwrap.dedent("""
        import sys
        import ember
        from ember import tune
        from ember_common import tracing
        def f(config):
            tune.report({"v": config["i"]})
        ember.init(num_cpus=2)
        tune.Tuner(f, param_space={"i": tune.grid_search([1, 2, 3])},
                   run_config=tune.RunConfig(storage_path=sys.argv[1], name="t", verbose=0)).fit()
        ember.shutdown()
        tracing.flush()
    """)
    env = dict(os.environ, OTEL_TRACES_EXPORTER="ember_file", EMBER_TRACE_DIR=str(span_dir),
               OTEL_BSP_SCHEDULE_DELAY="100")
    r = subprocess.run([sys.executable, "-c", driver, str(tmp_path)], env=env, capture_output=True,
                       text=True, timeout=180)
    assert r.returncode == 0, r.stderr[-3000:]
    spans = []
    for name in os.listdir(span_dir):
        with open(span_dir / name) as f:
            spans += [json.loads(line) for line in f if line.strip()]
    trials = [s for s in spans if s["name"] == "tune.trial"]
    assert len(trials) == 3
    assert {s["attributes"]["tune.status"] for s in trials} == {"TERMINATED"}
    assert len({s["trace_id"] for s in trials}) == 3
    # the actor calls of a trial belong to its trace
    for t in trials:
        assert any(s["trace_id"] == t["trace_id"] and s["service"] == "ember-worker" for s in spans)
