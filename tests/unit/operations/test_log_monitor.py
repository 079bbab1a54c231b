"""LogMonitor against real files in a temp dir (no GCS: publish is a recording fake)."""
from __future__ import annotations

import asyncio
import logging
import os

from ember_raylet import log_monitor as lm
from ember_raylet.log_monitor import LogMonitor

J1, J2 = bytes.fromhex("01000000"), bytes.fromhex("02000000")


def marker(job: bytes, name: str) -> str:
    return f"\x1e{job.hex()}\x1f{name}\n"


class Recorder:
    """Fake publish: fails the first `fail` calls, then records (job, pid, name, is_err, lines)."""

    def __init__(self, fail: int = 0) -> None:
        self.fail, self.attempts, self.calls = fail, 0, []

    async def __call__(self, batches) -> None:
        self.attempts += 1
        if self.fail:
            self.fail -= 1
            raise ConnectionError("GCS down")
        self.calls.append([(b.job_id, b.pid, b.name, b.is_err, list(b.lines)) for b in batches])

    def lines(self) -> list[str]:
        return [ln for call in self.calls for b in call for ln in b[4]]


def write(d, name: str, text: str | bytes) -> None:
    with open(os.path.join(d, name), "ab") as f:
        f.write(text.encode() if isinstance(text, str) else text)


def make(d, rec: Recorder, pids: dict[str, int] | None = None, **kw) -> LogMonitor:
    pids = pids if pids is not None else {}
    return LogMonitor(str(d), "node-1", rec, pids.get, **kw)


def poll(mon: LogMonitor, final: bool = False) -> None:
    asyncio.run(mon.poll_once(final=final))


def test_markers_switch_job_and_name_and_are_not_published(tmp_path):
    rec = Recorder()
    mon = make(tmp_path, rec, {"w1": 123})
    write(tmp_path, "worker-w1.out",
          marker(J1, "f") + "b\n" + "c\n" + marker(J2, "g") + "d\n" + marker(J1, "f") + "e\n")
    poll(mon)
    assert rec.calls == [[(J1, 123, "f", False, ["b", "c"]), (J2, 123, "g", False, ["d"]),
                          (J1, 123, "f", False, ["e"])]]
    assert not any("\x1e" in ln or "\x1f" in ln for ln in rec.lines())
    # The job/name persists across rounds until the next marker.
    write(tmp_path, "worker-w1.out", "f\n")
    poll(mon)
    assert rec.calls[-1] == [(J1, 123, "f", False, ["f"])]


def test_out_and_err_files(tmp_path):
    rec = Recorder()
    mon = make(tmp_path, rec, {"w1": 7})  # w2's pid is unknown -> 0
    write(tmp_path, "worker-w1.out", marker(J1, "t") + "to stdout\n")
    write(tmp_path, "worker-w1.err", marker(J1, "t") + "to stderr\n")
    write(tmp_path, "worker-w2.err", marker(J2, "u") + "other\n")
    write(tmp_path, "raylet.out", "not a worker log\n")
    poll(mon)
    got = sorted(b for call in rec.calls for b in call)
    assert got == [(J1, 7, "t", False, ["to stdout"]), (J1, 7, "t", True, ["to stderr"]),
                   (J2, 0, "u", True, ["other"])]
    assert len(rec.calls) == 1  # one publish per round


def test_node_id_set(tmp_path):
    seen = []

    async def publish(batches):
        seen.extend(batches)

    mon = LogMonitor(str(tmp_path), "node-xyz", publish, lambda wid: 5)
    write(tmp_path, "worker-a.out", "hi\n")
    poll(mon)
    assert [(b.node_id, b.pid, list(b.lines)) for b in seen] == [("node-xyz", 5, ["hi"])]


def test_lines_before_any_marker(tmp_path):
    rec = Recorder()
    mon = make(tmp_path, rec)
    write(tmp_path, "worker-w.out", "boot 1\nboot 2\n" + marker(J1, "f") + "x\n")
    poll(mon)
    assert rec.calls == [[(b"", 0, "", False, ["boot 1", "boot 2"]), (J1, 0, "f", False, ["x"])]]


def test_partial_line_held_until_newline(tmp_path):
    rec = Recorder()
    mon = make(tmp_path, rec)
    write(tmp_path, "worker-w.out", marker(J1, "f") + "one\nhel")
    poll(mon)
    assert rec.lines() == ["one"]
    write(tmp_path, "worker-w.out", "lo")
    poll(mon)
    assert rec.lines() == ["one"]
    write(tmp_path, "worker-w.out", " world\nnext\n")
    poll(mon)
    assert rec.lines() == ["one", "hello world", "next"]
    assert rec.calls[-1] == [(J1, 0, "f", False, ["hello world", "next"])]


def test_partial_line_flushed_when_old_or_long(tmp_path, monkeypatch):
    monkeypatch.setattr(lm, "PARTIAL_AGE_S", 0.05)
    rec = Recorder()
    mon = make(tmp_path, rec)
    write(tmp_path, "worker-w.out", "prompt> ")
    poll(mon)
    assert rec.lines() == []
    asyncio.run(asyncio.sleep(0.06))
    poll(mon)
    assert rec.lines() == ["prompt> "]
    write(tmp_path, "worker-w.out", "x" * (70 * 1024))
    poll(mon)
    assert rec.lines()[-1] == "x" * (70 * 1024)


def test_publish_failure_retried_without_loss_or_duplication(tmp_path):
    rec = Recorder(fail=2)
    mon = make(tmp_path, rec)
    write(tmp_path, "worker-w.out", marker(J1, "f") + "a\nb\n")
    poll(mon)
    write(tmp_path, "worker-w.out", "c\n")
    poll(mon)
    assert rec.attempts == 2 and rec.calls == []
    write(tmp_path, "worker-w.out", "d\n")
    poll(mon)
    assert rec.calls == [[(J1, 0, "f", False, ["a", "b", "c", "d"])]]
    poll(mon)  # nothing new: no publish, nothing re-sent
    assert rec.attempts == 3
    write(tmp_path, "worker-w.out", "e\n")
    poll(mon)
    assert rec.lines() == ["a", "b", "c", "d", "e"]


def test_pending_bounded_drops_oldest_with_one_warning(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(lm, "MAX_PENDING", 5)
    rec = Recorder(fail=3)
    mon = make(tmp_path, rec)
    with caplog.at_level(logging.WARNING, logger=lm.__name__):
        for i in range(3):
            write(tmp_path, "worker-w.out", "".join(f"{i}-{j}\n" for j in range(4)))
            poll(mon)
        poll(mon)
    assert rec.lines() == ["1-3", "2-0", "2-1", "2-2", "2-3"]
    assert sum("dropping" in r.getMessage() for r in caplog.records) == 1


def test_stop_does_final_flush_promptly(tmp_path):
    rec = Recorder()

    async def main():
        mon = make(tmp_path, rec, period_s=0.02)
        stop = asyncio.Event()
        task = asyncio.create_task(mon.run(stop))
        write(tmp_path, "worker-w.out", marker(J1, "f") + "early\n")
        for _ in range(100):  # published by the periodic rounds
            await asyncio.sleep(0.02)
            if rec.lines():
                break
        assert rec.lines() == ["early"]
        mon.period_s = 60.0  # the next wait is long: only stop can end it
        await asyncio.sleep(0.05)
        write(tmp_path, "worker-w.out", "late\nno newline")
        stop.set()
        await asyncio.wait_for(task, 2.0)

    asyncio.run(main())
    assert rec.lines() == ["early", "late", "no newline"]


def test_deleted_files_forgotten_and_unchanged_files_not_reread(tmp_path):
    rec = Recorder()
    mon = make(tmp_path, rec)
    write(tmp_path, "worker-a.out", "a1\n")
    write(tmp_path, "worker-b.err", "b1\npartial")
    poll(mon)
    poll(mon)  # unchanged: nothing re-read or duplicated
    write(tmp_path, "worker-a.out", "a2\n")
    poll(mon)
    assert sorted(rec.lines()) == ["a1", "a2", "b1"]
    os.remove(tmp_path / "worker-b.err")
    poll(mon)  # deleted: its held partial line is flushed, then the file is forgotten
    assert list(mon._files) == [str(tmp_path / "worker-a.out")]
    assert sorted(rec.lines()) == ["a1", "a2", "b1", "partial"]


def test_truncated_file_read_from_start(tmp_path):
    rec = Recorder()
    mon = make(tmp_path, rec)
    write(tmp_path, "worker-w.out", "first run line\n")
    poll(mon)
    (tmp_path / "worker-w.out").write_text("new\n")
    poll(mon)
    assert rec.lines() == ["first run line", "new"]


def test_invalid_utf8_replaced(tmp_path):
    rec = Recorder()
    mon = make(tmp_path, rec)
    write(tmp_path, "worker-w.out", b"ok \xff\xfe bytes\n")
    poll(mon)
    assert rec.lines() == ["ok \ufffd\ufffd bytes"]


def test_missing_logs_dir_is_tolerated(tmp_path):
    rec = Recorder()
    d = tmp_path / "logs"
    mon = make(d, rec)
    poll(mon)  # no dir yet: nothing happens, no error
    d.mkdir()
    write(d, "worker-w.out", "x\n")
    poll(mon)
    assert rec.lines() == ["x"]


def test_a_big_round_is_published_in_calls_under_the_publish_bound(tmp_path, monkeypatch):
    monkeypatch.setattr(lm, "PUBLISH_BYTES", 10_000)
    rec = Recorder()
    mon = make(tmp_path, rec)
    lines = [f"{i:04d}" + "x" * 996 for i in range(35)]  # 35 lines of 1000 characters
    write(tmp_path, "worker-w1.out", marker(J1, "f") + "".join(ln + "\n" for ln in lines))
    poll(mon)
    assert rec.lines() == lines  # all of them, in order
    assert len(rec.calls) == 4
    assert all(sum(len(ln) for b in call for ln in b[4]) <= 10_000 for call in rec.calls)


def test_a_print_loop_is_rate_limited_with_a_dropped_notice(tmp_path):
    rec = Recorder()
    mon = make(tmp_path, rec, {"w1": 9}, max_lines_per_s=100)
    # A bounded tight loop: 5,000 lines at once, far over 100 lines/s.
    write(tmp_path, "worker-w1.out", marker(J1, "spam") + "".join(f"line {i}\n" for i in range(5000)))
    poll(mon)
    lines = rec.lines()
    assert lines[:100] == [f"line {i}" for i in range(100)]  # the bucket: one second's worth
    notices = [ln for ln in lines if ln.startswith("[ember]")]
    assert len(lines) == 101 and len(notices) == 1
    assert "4900 lines of output dropped" in notices[0] and "worker-w1.out" in notices[0]
    assert "EMBER_LOG_TO_DRIVER_MAX_LINES_PER_S" in notices[0]
    # The notice goes to the job whose task printed, under the task's name.
    assert rec.calls[-1][-1][:3] == (J1, 9, "spam")
    # The file keeps every line.
    assert (tmp_path / "worker-w1.out").read_text().count("\n") == 5001


def test_the_rate_budget_refills(tmp_path):
    rec = Recorder()
    mon = make(tmp_path, rec, max_lines_per_s=1000)
    write(tmp_path, "worker-w.out", "".join(f"a{i}\n" for i in range(1000)))
    poll(mon)
    assert len(rec.lines()) == 1000  # exactly the budget: nothing dropped, no notice
    asyncio.run(asyncio.sleep(0.2))  # 200 more lines' worth
    write(tmp_path, "worker-w.out", "".join(f"b{i}\n" for i in range(150)))
    poll(mon)
    assert not any(ln.startswith("[ember]") for ln in rec.lines())
    assert rec.lines()[-1] == "b149"


def test_no_limit_by_default(tmp_path):
    rec = Recorder()
    mon = make(tmp_path, rec)
    write(tmp_path, "worker-w.out", "".join(f"{i}\n" for i in range(8000)))
    poll(mon)
    assert len(rec.lines()) == 8000


def test_a_worker_file_rotates_at_the_cap_with_bounded_backups(tmp_path):
    rec = Recorder()
    mon = make(tmp_path, rec, {"w1": 5}, max_bytes=10_000, backup_count=2)
    line = "y" * 99 + "\n"
    for rnd in range(6):  # a bounded print loop: 6 rounds of 12 kB, each over the cap
        write(tmp_path, "worker-w1.out", f"round {rnd}\n" + line * 120)
        poll(mon)
    names = sorted(os.listdir(tmp_path))
    assert names == ["worker-w1.out", "worker-w1.out.1", "worker-w1.out.2"]
    assert all(os.path.getsize(tmp_path / n) <= 13_000 for n in names)
    assert (tmp_path / "worker-w1.out.1").read_text().startswith("round 5\n")
    # Every line was read before its file rotated: none lost on the way to the driver.
    assert rec.lines().count("y" * 99) == 6 * 120 and not any("[ember]" in ln for ln in rec.lines())


def test_only_this_raylets_workers_and_own_files_rotate(tmp_path):
    rec = Recorder()
    mon = make(tmp_path, rec, {"mine": 1}, max_bytes=100, backup_count=1,
               own_files=("raylet-abcd.err",))
    for name in ("worker-mine.out", "worker-other.out", "raylet-abcd.err", "gcs.err"):
        write(tmp_path, name, "z" * 200 + "\n")
    poll(mon)
    assert sorted(os.listdir(tmp_path)) == ["gcs.err", "raylet-abcd.err", "raylet-abcd.err.1",
                                            "worker-mine.out", "worker-mine.out.1", "worker-other.out"]


def test_bytes_rotated_before_they_were_read_are_counted(tmp_path, monkeypatch):
    monkeypatch.setattr(lm, "READ_CHUNK", 1000)  # the monitor reads 1000 bytes a round
    rec = Recorder()
    mon = make(tmp_path, rec, {"w": 3}, max_bytes=2000, backup_count=1)
    write(tmp_path, "worker-w.out", ("q" * 9 + "\n") * 500)  # 5000 bytes at once
    poll(mon)
    notices = [ln for ln in rec.lines() if ln.startswith("[ember]")]
    assert len(notices) == 1 and "4000 bytes of output not forwarded" in notices[0], notices
    assert rec.lines().count("q" * 9) == 100


def test_only_this_raylets_workers_are_forwarded(tmp_path):
    """Nodes of one machine may share a log directory: each raylet forwards its own workers'."""
    rec = Recorder()
    mon = make(tmp_path, rec, mine={"mine"}.__contains__)
    write(tmp_path, "worker-mine.out", "from my worker\n")
    write(tmp_path, "worker-theirs.out", "from another raylet's worker\n")
    poll(mon)
    assert rec.lines() == ["from my worker"]


def test_lines_of_an_exited_worker_keep_its_pid(tmp_path):
    rec = Recorder()
    pids = {"w1": 41}
    mon = make(tmp_path, rec, pids)
    write(tmp_path, "worker-w1.err", marker(J1, "A.f") + "while alive\n")
    poll(mon)
    del pids["w1"]  # the raylet forgets the worker once it exits; a child may still write
    write(tmp_path, "worker-w1.err", "after it exited\n")
    poll(mon)
    assert [b[1] for call in rec.calls for b in call] == [41, 41]
