"""`ember logs` usage errors: one line naming the problem, exit code 2, before any cluster is
looked for (no cluster runs here)."""
from __future__ import annotations

import pytest

from ember._tools.cli import main


@pytest.mark.parametrize("argv, expected", [
    (["logs", "actor"], "`ember logs actor` needs --id or --pid"),
    (["logs", "task"], "`ember logs task` needs --id"),
    (["logs", "worker"], "`ember logs worker` needs --pid"),
    (["logs", "job"], "`ember logs job` needs --id"),
    (["logs", "task", "--id", "ab", "--pid", "3"], "takes --id, not --pid"),
    (["logs", "a*", "b*"], "unexpected argument 'b*' for `ember logs cluster`"),
    (["logs", "worker", "x.out", "--pid", "3"], "unexpected argument 'x.out' for `ember logs worker`"),
    (["logs", "--tail", "-2"], "--tail must be -1 (everything) or >= 0, got -2"),
    (["logs", "--node-id", "ab", "--node-ip", "1.2.3.4"], "give --node-id or --node-ip, not both"),
])
def test_usage_errors_are_one_line(argv, expected, capsys, monkeypatch):
    monkeypatch.setenv("EMBER_ADDRESS", "127.0.0.1:1")  # never reached
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("ember: error: ") and expected in err, err
