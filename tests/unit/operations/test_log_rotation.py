"""Log rotation (copytruncate) on real files: backups shift and stay bounded, the copy is
private, and a writer holding the file open with O_APPEND goes on at its start."""
from __future__ import annotations

import os
import stat

from ember_raylet import log_rotation


def read(path: str) -> str:
    with open(path) as f:
        return f.read()


def test_rotation_shifts_backups_and_keeps_at_most_backup_count(tmp_path):
    path = str(tmp_path / "worker-a.out")
    for i in range(5):
        with open(path, "w") as f:
            f.write(f"generation {i}\n")
        assert log_rotation.rotate(path, 3) == len(f"generation {i}\n")
        assert os.path.getsize(path) == 0
    names = sorted(os.listdir(tmp_path))
    assert names == ["worker-a.out", "worker-a.out.1", "worker-a.out.2", "worker-a.out.3"]
    assert [read(f"{path}.{k}") for k in (1, 2, 3)] == \
        ["generation 4\n", "generation 3\n", "generation 2\n"]
    assert stat.S_IMODE(os.stat(f"{path}.1").st_mode) == 0o600


def test_zero_backups_drops_the_content(tmp_path):
    path = str(tmp_path / "a.err")
    with open(path, "w") as f:
        f.write("x" * 100)
    assert log_rotation.rotate(path, 0) == 0
    assert os.listdir(tmp_path) == ["a.err"] and os.path.getsize(path) == 0


def test_rotate_if_big_only_at_the_cap(tmp_path):
    path = str(tmp_path / "a.out")
    with open(path, "w") as f:
        f.write("x" * 99)
    assert not log_rotation.rotate_if_big(path, 100, 2)
    assert not log_rotation.rotate_if_big(path, 0, 2)  # 0: never
    with open(path, "a") as f:
        f.write("x")
    assert log_rotation.rotate_if_big(path, 100, 2)
    assert os.path.getsize(path) == 0 and os.path.getsize(path + ".1") == 100
    assert not log_rotation.rotate_if_big(str(tmp_path / "missing"), 1, 2)


def test_an_append_writer_continues_at_the_start(tmp_path):
    path = str(tmp_path / "w.out")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)  # as a worker's stdout
    try:
        os.write(fd, b"a" * 1000 + b"\n")
        log_rotation.rotate(path, 1)
        os.write(fd, b"after\n")
    finally:
        os.close(fd)
    assert read(path) == "after\n"  # no hole of the old size
    assert os.path.getsize(path + ".1") == 1001


def test_is_backup():
    assert log_rotation.is_backup("worker-a.out.1") and log_rotation.is_backup("gcs.err.12")
    assert not log_rotation.is_backup("worker-a.out") and not log_rotation.is_backup("x.")
