"""The `ember` CLI's conventions without a cluster: where the address comes from (flag >
$EMBER_ADDRESS > $RAY_ADDRESS > the cluster started here), one-line usage errors with exit
code 2, --verbose taken anywhere before `--`, and table cells cut at a word with an ellipsis."""
from __future__ import annotations

import pytest

from ember._tools import cli
from ember._tools.cli import common


def test_address_precedence_is_rays(monkeypatch):
    monkeypatch.delenv("EMBER_ADDRESS", raising=False)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert common.given_address(None) == "auto"
    monkeypatch.setenv("RAY_ADDRESS", "ray:1")
    assert common.given_address(None) == "ray:1"
    monkeypatch.setenv("EMBER_ADDRESS", "ember:2")
    assert common.given_address(None) == "ember:2"
    assert common.given_address("flag:3") == "flag:3"


def test_job_commands_also_read_ray_api_server_address(monkeypatch):
    monkeypatch.delenv("EMBER_ADDRESS", raising=False)
    monkeypatch.setenv("RAY_ADDRESS", "ray:1")
    monkeypatch.setenv("RAY_API_SERVER_ADDRESS", "http://dash:8265")
    assert common.given_address(None) == "ray:1"
    assert common.given_address(None, jobs=True) == "http://dash:8265"
    monkeypatch.setenv("EMBER_ADDRESS", "ember:2")
    assert common.given_address(None, jobs=True) == "ember:2"


@pytest.mark.parametrize("bad", ["local", "nohostport", "host:notaport"])
def test_a_malformed_address_is_a_usage_error(bad):
    with pytest.raises(common.UsageError, match="HOST:PORT"):
        common.resolve_address(bad)


def test_ember_scheme_and_host_port_pass_through():
    assert common.resolve_address("ember://10.0.0.1:6379") == "10.0.0.1:6379"
    assert common.resolve_address("10.0.0.1:6379") == "10.0.0.1:6379"


def test_usage_errors_are_one_line_with_exit_code_2(capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["list", "bogus"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("ember: error: argument what: invalid choice: 'bogus'"), err
    assert err.count("\n") == 1, err


def test_version(capsys):
    import ember

    with pytest.raises(SystemExit) as e:
        cli.main(["--version"])
    assert e.value.code == 0 and capsys.readouterr().out == f"ember {ember.__version__}\n"


def test_verbose_is_taken_before_the_entrypoint_only():
    assert cli._split_verbose(["status", "--verbose"]) == (["status"], True)
    assert cli._split_verbose(["-v", "job", "submit", "--", "x", "--verbose"]) == (
        ["job", "submit", "--", "x", "--verbose"], True)
    assert cli._split_verbose(["job", "submit", "--", "x", "-v"]) == (["job", "submit", "--", "x", "-v"], False)


@pytest.mark.parametrize("text,width,want", [
    ("python train.py --epochs 10", 60, "python train.py --epochs 10"),
    ("python my_training_script.py --learning-rate 0.001", 30, "python my_training_script.py…"),
    ("one two three four", 12, "one two…"),
    ("averyveryverylongsingleword", 10, "averyvery…"),
])
def test_clip_cuts_at_a_word_with_an_ellipsis(text, width, want):
    got = common.clip(text, width)
    assert got == want and len(got) <= width
