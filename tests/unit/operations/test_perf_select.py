"""`ember microbenchmark --name`: one workload chosen by its whole name (scripts/compare_ray.py
--alternate runs each row this way), as opposed to --filter's substring."""
from __future__ import annotations

import pytest

from ember._tools import perf


def test_name_picks_exactly_one_row_where_filter_picks_several() -> None:
    names = perf.all_names()
    assert sum(perf.selects(n, "1:1 actor calls async") for n in names) == 1
    # "calls async" as a filter matches many rows; as a name, none.
    assert sum(perf.selects(n, "calls async") for n in names) > 3
    assert not any(perf.selects(n, "calls async", exact=True) for n in names)


def test_every_name_selects_only_itself() -> None:
    names = perf.all_names()
    for n in names:
        assert [m for m in names if perf.selects(m, n, exact=True)] == [n]


def test_ray_lists_no_ember_only_workload() -> None:
    ember, ray = perf.all_names("ember"), perf.all_names("ray")
    assert set(ray) < set(ember)
    assert "node-to-node transfer gigabytes" in set(ember) - set(ray)


def test_unknown_name_is_an_error_that_names_it(capsys: pytest.CaptureFixture[str]) -> None:
    assert perf.main(["--name", "no such workload"]) == 1
    assert "no workload name is called 'no such workload'" in capsys.readouterr().err
