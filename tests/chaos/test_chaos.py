"""The chaos suite: a mixed workload on the compose cluster (by default the HA one: three GCS
replicas, conftest) while a seeded fault loop kills and restarts containers (raylet, objmgr, a
GCS replica, etcd, serve-proxy), SIGKILLs worker processes, cuts the worker node off the network,
SIGKILLs the GCS leader and cuts the leader off etcd (leader_faults; the run starts with these
two), all through the `docker` SDK.

Invariants checked at the end:
  - every result that returned is correct (tasks, actor calls, 50 MB objects, Data, HTTP);
  - nothing made before the faults is lost: a named detached actor (its count), a KV entry, a
    named detached placement group, the set-up's job (a fresh driver checks, after the faults);
  - after a leader fault another replica leads, and the deposed one refuses writes (while cut
    off from etcd and after it is back);
  - every failure is an Ember exception whose message names its cause;
  - no operation hangs past its bound (EMBER_CHAOS_OP_BOUND_S, each `get` has that timeout);
  - every fault is followed by a healthy cluster within the recovery bound, and so is the end;
  - the object stores and spill directories come back to their baseline (nothing leaked).
HTTP availability through the proxy (client retrying once) is reported overall and per fault
kind (requests started between a fault's injection and its recovery); the run fails below
EMBER_CHAOS_MIN_AVAILABILITY overall (default 0.9: container kills of the node serving a request
lose it) or below EMBER_CHAOS_MIN_LEADER_AVAILABILITY (default 0.99, the issue's goal) during the
leader faults.

Figures (faults by kind, operations, errors by type, recovery time per fault, availability) go to
`<artifacts>/chaos-<seed>.json` next to the fault log `faults-<seed>.jsonl`, and are printed.
Replay a run: EMBER_CHAOS_SEED=<seed> (the fault order is the seed's; timings are logged).
"""
from __future__ import annotations

import json
import os
import random
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from .conftest import GCS_MODE, ChaosCluster
from .docker_faults import DockerCluster, FaultRunner, cluster_problem
from .faults import LEADER_KINDS, FaultLog, FaultSchedule, availability_by_kind, summarize
from .http_load import HttpLoad

DURATION_S = float(os.environ.get("EMBER_CHAOS_DURATION_S", "90"))
OP_BOUND_S = float(os.environ.get("EMBER_CHAOS_OP_BOUND_S", "120"))
RECOVERY_BOUND_S = float(os.environ.get("EMBER_CHAOS_RECOVERY_BOUND_S", "120"))
MIN_AVAILABILITY = float(os.environ.get("EMBER_CHAOS_MIN_AVAILABILITY", "0.9"))
MIN_LEADER_AVAILABILITY = float(os.environ.get("EMBER_CHAOS_MIN_LEADER_AVAILABILITY", "0.99"))
# Which fault kinds run (comma-separated, of faults.DEFAULT_WEIGHTS); all that fit the cluster
# by default (the leader kinds need the HA one).
KINDS = [k for k in os.environ.get("EMBER_CHAOS_KINDS", "kill,sigkill,netcut" + (
    ",leader-kill,leader-partition" if GCS_MODE == "ha" else "")).split(",") if k]
# Which workload loops run (the driver's LOOPS); all by default.
LOOPS = os.environ.get("EMBER_CHAOS_LOOPS", "task,actor,object50MB,data")
# Bytes an objmgr may hold above its baseline once the workload is gone (small inline leftovers
# such as a Serve replica's state); a leaked 50 MB object is far above it.
STORE_SLACK_BYTES = 8 * 2**20

pytestmark = [pytest.mark.chaos,
              pytest.mark.timeout(int(DURATION_S + OP_BOUND_S + 3 * RECOVERY_BOUND_S + 600))]


class DriverOutput:
    """The workload driver's JSON lines, read in a thread."""

    def __init__(self, proc: Any) -> None:
        self.proc = proc
        self.records: list[dict[str, Any]] = []
        self.other: list[str] = []
        self.err: list[str] = []
        self._threads = [threading.Thread(target=self._read, args=(proc.stdout, True), daemon=True),
                         threading.Thread(target=self._read, args=(proc.stderr, False), daemon=True)]
        for t in self._threads:
            t.start()

    def _read(self, stream: Any, out: bool) -> None:
        try:
            self._read_lines(stream, out)
        except (ValueError, OSError):  # the pipe was closed under us (close() after a timeout)
            pass

    def _read_lines(self, stream: Any, out: bool) -> None:
        for line in stream:
            line = line.rstrip("\n")
            if not out:
                self.err.append(line)
                continue
            try:
                self.records.append(json.loads(line))
            except ValueError:
                self.other.append(line)

    def first(self, kind: str) -> dict[str, Any] | None:
        return next((r for r in self.records if r.get("type") == kind), None)

    def wait_for(self, kind: str, timeout_s: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        while (rec := self.first(kind)) is None:
            if self.proc.poll() is not None and not any(t.is_alive() for t in self._threads):
                raise AssertionError(f"driver exited ({self.proc.returncode}) before {kind!r}: "
                                     f"{self.tail()}")
            assert time.monotonic() < deadline, f"no {kind!r} from the driver in {timeout_s}s: {self.tail()}"
            time.sleep(0.2)
        return rec

    def finish(self, timeout_s: float) -> int:
        try:
            rc = int(self.proc.wait(timeout_s))
        except Exception:
            self.close()
            raise AssertionError(f"the workload driver did not end within {timeout_s}s: {self.tail()}") from None
        self.close()
        return rc

    def close(self) -> None:
        """Kills the driver if it still runs; joins the readers and closes the pipes."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)
        for t in self._threads:
            t.join(10)
        for f in (self.proc.stdout, self.proc.stderr):
            if f is not None:
                f.close()

    def tail(self) -> str:
        return "\n".join(self.other[-20:] + self.err[-40:])


def _wait(what: str, bound_s: float, check: Any) -> float:
    """Polls `check()` (None when done, else what is missing) for up to `bound_s`."""
    t0 = time.monotonic()
    problem = "not checked"
    while time.monotonic() - t0 < bound_s:
        try:
            problem = check()
        except Exception as e:
            problem = f"{type(e).__name__}: {e}"
        if problem is None:
            return time.monotonic() - t0
        time.sleep(1)
    raise AssertionError(f"{what}: not within {bound_s}s: {problem}")


def _try(fn: Any) -> str:
    try:
        return str(fn())
    except Exception as e:
        return f"{type(e).__name__}: {e}"


def _leaks(base: dict[str, dict[str, float]], now: dict[str, dict[str, float]]) -> str | None:
    out = []
    for node, b in base.items():
        n = now[node]
        if n["used_bytes"] > b["used_bytes"] + STORE_SLACK_BYTES:
            out.append(f"{node}: {n['used_bytes']:.0f} arena bytes used, baseline {b['used_bytes']:.0f}")
        if n["spill_dir_bytes"] > b["spill_dir_bytes"] or n["spilled_bytes"] > b["spilled_bytes"]:
            out.append(f"{node}: spill {n['spill_dir_bytes']:.0f} B on disk, baseline {b['spill_dir_bytes']:.0f}")
    return "; ".join(out) or None


def test_mixed_workload_under_faults(chaos_cluster: ChaosCluster, artifacts: Path) -> None:
    c = chaos_cluster
    seed = int(os.environ.get("EMBER_CHAOS_SEED") or random.SystemRandom().randrange(1 << 31))
    print(f"\nchaos seed {seed} (replay: EMBER_CHAOS_SEED={seed}), duration {DURATION_S:.0f}s, "
          f"artifacts {artifacts}")
    dc = DockerCluster(c.project, c.http_port, c.gcs_replicas)
    try:
        _run_suite(c, dc, seed, artifacts)
    finally:
        dc.close()


def _run_suite(c: ChaosCluster, dc: DockerCluster, seed: int, artifacts: Path) -> None:
    # 1. the Serve app, then the baseline of the stores with nothing of the workload in them
    setup = DriverOutput(c.driver("serve"))
    try:
        setup.wait_for("serve_ready", 300)
        kept_job = setup.wait_for("kept", 10)["job_id"]
        assert setup.finish(60) == 0, setup.tail()
    finally:
        setup.close()
    _wait("the Serve app answers through the proxy", 120,
          lambda: None if dc.http_ok("/chaos?x=1") else "no 200 yet")
    baseline = dc.store_usage()

    # 2. workload + HTTP load + faults, together
    http = HttpLoad(c.http_port).start()
    work = DriverOutput(c.driver(f"run {DURATION_S} {OP_BOUND_S} {LOOPS}"))
    report: dict[str, Any] = {"seed": seed, "duration_s": DURATION_S, "op_bound_s": OP_BOUND_S,
                              "loadavg_start": Path("/proc/loadavg").read_text().split()[:3]}
    log_path = artifacts / f"faults-{seed}.jsonl"
    with open(log_path, "w") as f:
        log = FaultLog(f, seed)
        try:
            work.wait_for("ready", 180)
            schedule = FaultSchedule.of_kinds(seed, KINDS, lead=LEADER_KINDS)
            runner = FaultRunner(dc, schedule, log,
                                 lambda: cluster_problem(dc, "/chaos?x=0"), RECOVERY_BOUND_S)
            runner.run(DURATION_S, stop=lambda: work.proc.poll() is not None)
            rc = work.finish(DURATION_S + OP_BOUND_S + 120)
        finally:
            http.stop()
            work.close()
        # 3. after the faults: healthy again, a fresh driver works, the stores are back to baseline
        final_recovery_s = _wait("healthy cluster after the faults", RECOVERY_BOUND_S,
                                 lambda: cluster_problem(dc, "/chaos?x=0"))
        log.write({"event": "final_recovery", "recovery_s": round(final_recovery_s, 2)})
        try:
            leak_s = _wait("object stores and spill directories back to baseline", RECOVERY_BOUND_S,
                           lambda: _leaks(baseline, dc.store_usage()))
        except AssertionError as e:
            left = {svc: _try(lambda svc=svc: dc.store_objects(svc)) for svc in ("objmgr-head", "objmgr-worker")}
            log.write({"event": "store_leak", "objects": left})
            raise AssertionError(f"{e} (seed {seed}); objects left: {json.dumps(left, indent=1)}; "
                                 f"fault log {log_path}") from None
        log.write({"event": "stores_at_baseline", "after_s": round(leak_s, 2)})
        check = DriverOutput(c.driver(f"check {kept_job}"))
        try:
            kept = check.wait_for("kept_check", 180)
            assert check.finish(60) == 0, check.tail()
        finally:
            check.close()
        log.write({"event": "kept_check", **kept})
        records = log.records

    with open(artifacts / f"driver-{seed}.jsonl", "w") as f:  # every line the driver wrote
        f.writelines(json.dumps(r, sort_keys=True) + "\n" for r in work.records)
        f.writelines(json.dumps({"stderr": ln}) + "\n" for ln in work.err[-200:])
    summary = work.first("summary")
    report.update(summarize(records))
    report["http_by_fault_kind"] = availability_by_kind(records, http.samples)
    leader_faults = [{k: r.get(k) for k in ("index", "kind", "old_leader", "new_leader", "failover_s",
                                             "old_write", "violation")}
                     for r in records if r.get("phase") == "injected" and r.get("kind") in LEADER_KINDS]
    report["leader_faults"] = leader_faults
    report.update({
        "workload_exit": rc, "workload": summary, "http": http.figures(),
        "final_recovery_s": round(final_recovery_s, 2), "stores_back_after_s": round(leak_s, 2),
        "store_baseline": baseline, "store_after": dc.store_usage(),
        "loadavg_end": Path("/proc/loadavg").read_text().split()[:3], "fault_log": str(log_path)})
    (artifacts / f"chaos-{seed}.json").write_text(json.dumps(report, indent=1, sort_keys=True))
    print(json.dumps({k: report[k] for k in ("seed", "faults_by_kind", "recovery", "http",
                                             "http_by_fault_kind", "leader_faults", "final_recovery_s",
                                             "loadavg_start", "loadavg_end")}))
    if summary:
        print(json.dumps({k: summary[k] for k in ("ops", "ok", "errors", "max_s")}))

    assert summary is not None, f"no summary from the workload driver (exit {rc}): {work.tail()}"
    assert not summary["violations"], f"workload invariants broken (seed {seed}): {summary['violations']}"
    assert rc == 0, f"workload driver exit {rc}: {work.tail()}"
    assert not report["not_recovered"], f"faults the cluster did not recover from (seed {seed}): " \
                                        f"{report['not_recovered']}"
    assert not http.violations, http.violations
    assert not kept["lost"], f"lost across the faults (seed {seed}): {kept['lost']}"
    fenced = [f["violation"] for f in leader_faults if f.get("violation")]
    assert not fenced, f"a deposed GCS leader took writes (seed {seed}): {fenced}"
    for kind in set(KINDS) & set(LEADER_KINDS):
        fig = report["http_by_fault_kind"].get(kind)
        assert fig and fig["requests"], f"no {kind} fault with HTTP load in the run: {report['faults_by_kind']}"
        assert fig["availability"] >= MIN_LEADER_AVAILABILITY, \
            f"HTTP availability during {kind} {fig} < {MIN_LEADER_AVAILABILITY} (seed {seed})"
    for kind in LOOPS.split(","):
        assert summary["ok"].get(kind, 0) > 0, f"no {kind} operation succeeded: {summary}"
    avail = report["http"]["availability"]
    assert avail is not None and avail >= MIN_AVAILABILITY, \
        f"HTTP availability {avail} < {MIN_AVAILABILITY} (seed {seed}): {report['http']}"
