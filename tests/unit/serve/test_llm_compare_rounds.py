"""compare_llm.py's summary of alternating rounds: per-round ratios against the reference, the
ratio of the medians, 1-stream TTFT differences (pure: fed made-up results, no process)."""
from __future__ import annotations

import argparse
import os
import sys

import pytest

SCRIPTS = os.path.join(os.path.dirname(__file__), "..", "..", "..", "scripts")


@pytest.fixture()
def compare_llm(monkeypatch):
    monkeypatch.syspath_prepend(SCRIPTS)
    import compare_llm as mod

    yield mod
    for name in ("compare_llm", "_llm_load", "_llm_servers", "compare_serve_stream", "_server_proc"):
        sys.modules.pop(name, None)


def _res(tps, ttft1, load=1.0):
    return {"many": {"tokens_per_s": tps, "ttft_p50_ms": 10.0, "ttft_p99_ms": 20.0, "p50_ms": 300.0, "errors": 0,
                     "cpu_us_per_token": {"core:7": 300.0, "total": 400.0}},
            "one": {"ttft_p50_ms": ttft1}, "load_avg": load}


def test_report_gives_medians_and_per_round_ratios(compare_llm, capsys):
    args = argparse.Namespace(hidden=128, layers=4, concurrency=16, max_tokens=64, engine_kwargs="{}")
    rounds = [{"direct": _res(2000, 8.0), "ember": _res(1800, 11.0)},
              {"direct": _res(3000, 9.0), "ember": _res(2400, 12.5)},
              {"direct": _res(2500, 7.0), "ember": _res(2450, 9.0)}]
    s = compare_llm.report(rounds, args)
    assert s["reference"] == "direct"
    e = s["systems"]["ember"]
    assert e["round_ratios"] == [0.9, 0.8, 0.98]
    assert e["median_round_ratio"] == 0.9
    assert e["ratio_of_medians"] == round(2400 / 2500, 3)
    assert e["round_ttft1_diff_ms"] == [3.0, 3.5, 2.0] and e["median_ttft1_diff_ms"] == 3.0
    assert "core 300.0" in capsys.readouterr().out


def test_reference_is_the_first_system_without_direct(compare_llm):
    args = argparse.Namespace(hidden=128, layers=4, concurrency=16, max_tokens=64, engine_kwargs="{}")
    s = compare_llm.report([{"ember": _res(2000, 8.0), "ember@before": _res(1000, 9.0)}], args)
    assert s["reference"] == "ember"
    assert s["systems"]["ember@before"]["round_ratios"] == [0.5]


def test_unknown_systems_are_named(compare_llm):
    args = argparse.Namespace(before="")
    with pytest.raises(SystemExit, match="needs --before"):
        compare_llm.run_system("ember@before", "/nonexistent", args)
    with pytest.raises(SystemExit, match="unknown system 'vllm'"):
        compare_llm.run_system("vllm", "/nonexistent", args)
    with pytest.raises(SystemExit, match="tree suffix"):
        compare_llm.run_system("ember@main", "/nonexistent", args)
