"""The raylet log service's pure core on real files in a tmp dir: listing, names that never
leave the log directory (.., absolute paths, separators, symlinks out), where the last N lines
start, chunked reads that start over after a truncation."""
from __future__ import annotations

import os

import pytest

from ember_raylet import log_files


def test_list_files_regular_files_only_sorted_and_globbed(tmp_path):
    (tmp_path / "worker-a.out").write_text("x\n")
    (tmp_path / "worker-a.err").write_text("")
    (tmp_path / "raylet-1.err").write_text("boom\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "link.out").symlink_to(tmp_path / "worker-a.out")
    names = [f.name for f in log_files.list_files(str(tmp_path))]
    assert names == ["raylet-1.err", "worker-a.err", "worker-a.out"]  # no directory, no symlink
    assert [f.name for f in log_files.list_files(str(tmp_path), "worker-*.out")] == ["worker-a.out"]
    f = log_files.list_files(str(tmp_path), "raylet-1.err")[0]
    assert f.size == 5 and f.mtime > 0
    assert log_files.list_files(str(tmp_path / "missing")) == []


@pytest.mark.parametrize("name", ["../secret", "/etc/passwd", "sub/x", "..", ".", "", "a\\b", "a\x00b",
                                  "x" * 256])
def test_names_with_a_path_are_refused(tmp_path, name):
    with pytest.raises(ValueError, match="bad log file name"):
        log_files.resolve(str(tmp_path), name)


def test_symlinks_out_of_the_directory_and_missing_files_are_not_found(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("secret\n")
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "out.log").symlink_to(secret)
    (logs / "dir").symlink_to(tmp_path)
    (logs / "sub").mkdir()
    for name in ("out.log", "dir", "sub", "nope.log"):
        with pytest.raises(log_files.NoLogFile, match=f"no log file {name!r}"):
            log_files.resolve(str(logs), name)
    (logs / "real.log").write_text("ok\n")
    (logs / "inside.log").symlink_to(logs / "real.log")  # stays inside: allowed
    assert log_files.resolve(str(logs), "inside.log") == os.path.realpath(logs / "real.log")


@pytest.mark.parametrize("text, lines, expected", [
    ("a\nb\nc\n", 2, "b\nc\n"), ("a\nb\nc\n", 3, "a\nb\nc\n"), ("a\nb\nc\n", 10, "a\nb\nc\n"),
    ("a\nb\nc", 1, "c"), ("a\nb\nc", 2, "b\nc"), ("a\nb\nc\n", 0, ""), ("a\nb\nc\n", -1, "a\nb\nc\n"),
    ("", 5, ""), ("\n\n\n", 2, "\n\n"),
])
def test_tail_offset(tmp_path, text, lines, expected):
    p = tmp_path / "f.log"
    p.write_text(text)
    off = log_files.tail_offset(str(p), lines)
    assert p.read_text()[off:] == expected


def test_tail_offset_across_scan_blocks(tmp_path):
    p = tmp_path / "big.log"
    p.write_text("".join(f"line {i:06d} " + "x" * 100 + "\n" for i in range(5000)))
    off = log_files.tail_offset(str(p), 1500)
    tail = p.read_text()[off:].splitlines()
    assert len(tail) == 1500 and tail[0].startswith("line 003500")


def test_read_chunk_bounded_and_restarts_after_truncation(tmp_path):
    p = tmp_path / "f.log"
    p.write_bytes(b"0123456789")
    data, off = log_files.read_chunk(str(p), 0, 4)
    assert (data, off) == (b"0123", 4)
    data, off = log_files.read_chunk(str(p), off)
    assert (data, off) == (b"456789", 10)
    p.write_bytes(b"new\n")  # truncated (rotated) and written again
    assert log_files.read_chunk(str(p), off) == (b"new\n", 4)


def test_worker_file_names_and_bad_suffix():
    assert log_files.worker_file("abc", "out") == "worker-abc.out"
    assert log_files.worker_file("abc", "err") == "worker-abc.err"
    with pytest.raises(ValueError, match="suffix must be 'out' or 'err'"):
        log_files.worker_file("abc", "log")
