"""The state API's pure part (ember.util.state.common): Ray's filters, limits, detail columns,
schemas that read like dicts, and the summaries, on hand-made rows (no cluster)."""
from __future__ import annotations

import pytest

from ember.util.state import common


def actor(i: int, state: str = "ALIVE", cls: str = "Counter", **kw):
    row = {"actor_id": f"{i:032x}", "class_name": cls, "state": state, "job_id": "01000000",
           "name": f"a{i}", "node_id": "n1", "pid": 100 + i, "ray_namespace": "ns",
           "serialized_runtime_env": None, "required_resources": {"CPU": 1.0},
           "death_cause": None, "is_detached": False, "placement_group_id": None, "repr_name": cls,
           "num_restarts": 0, "num_restarts_due_to_lineage_reconstruction": 0,
           "num_restarts_due_to_node_preemption": 0, "call_site": None, "label_selector": None,
           "fallback_strategy": None}
    row.update(kw)
    return row


ROWS = [actor(1), actor(2, "DEAD"), actor(3, cls="Worker"), actor(4, "RESTARTING")]


def test_filters_equal_and_not_equal_case_insensitive():
    got, matched = common.apply("actors", ROWS, filters=[("state", "=", "alive")])
    assert [a.actor_id for a in got] == [ROWS[0]["actor_id"], ROWS[2]["actor_id"]] and matched == 2
    got, _ = common.apply("actors", ROWS, filters=[("state", "!=", "ALIVE"), ("class_name", "=", "Counter")])
    assert [a.state for a in got] == ["DEAD", "RESTARTING"]


def test_numeric_filters_compare_values_not_text():
    got, _ = common.apply("actors", ROWS, filters=[("pid", "=", "102")])
    assert [a.pid for a in got] == [102]
    got, _ = common.apply("actors", ROWS, filters=[("pid", "=", 103)])
    assert [a.pid for a in got] == [103]


def test_limit_truncates_and_counts_what_matched():
    got, matched = common.apply("actors", ROWS, limit=2)
    assert len(got) == 2 and matched == 4


def test_detail_columns_only_with_detail():
    plain, _ = common.apply("actors", ROWS[:1])
    assert plain[0].required_resources is None and plain[0].num_restarts is None
    full, _ = common.apply("actors", ROWS[:1], detail=True)
    assert full[0].required_resources == {"CPU": 1.0} and full[0].num_restarts == 0


def test_schema_reads_like_a_dict_and_as_a_dataclass():
    a = common.apply("actors", ROWS[:1], detail=True)[0][0]
    assert a["state"] == a.state == "ALIVE"
    assert a.asdict()["name"] == "a1"
    assert "name" in common.ActorState.list_columns(detail=False)
    assert "required_resources" not in common.ActorState.list_columns(detail=False)


@pytest.mark.parametrize("filters, match", [
    ([("colour", "=", "red")], "Given filter column 'colour' is not supported"),
    ([("state", ">", "ALIVE")], "Unsupported filter predicate '>'"),
    ([("state", "ALIVE")], "a filter is a"),
    ([("required_resources", "=", "x")], "not supported"),  # not filterable
])
def test_bad_filters_name_the_problem(filters, match):
    with pytest.raises(ValueError, match=match):
        common.apply("actors", ROWS, filters=filters)


@pytest.mark.parametrize("limit", [0, -1, "10"])
def test_bad_limit(limit):
    with pytest.raises(ValueError, match="limit must be a positive integer"):
        common.apply("actors", ROWS, limit=limit)


def test_summarize_actors_counts_by_class_and_state():
    s = common.summarize_actors(ROWS)["cluster"]
    assert s["total_actors"] == 4 and s["summary_by"] == "class"
    assert s["summary"]["Counter"] == {"class_name": "Counter",
                                       "state_counts": {"ALIVE": 1, "DEAD": 1, "RESTARTING": 1}}
    assert s["summary"]["Worker"]["state_counts"] == {"ALIVE": 1}


def test_summarize_objects_totals():
    objs = [{"object_id": "a", "object_size": 2**20, "task_status": "FINISHED", "attempt_number": 0,
             "reference_type": "PINNED_IN_MEMORY", "call_site": "disabled", "node_id": "n1",
             "owner_worker_id": "w1"},
            {"object_id": "b", "object_size": 2**21, "task_status": "FINISHED", "attempt_number": 0,
             "reference_type": "LOCAL_REFERENCE", "call_site": "disabled", "node_id": "n2",
             "owner_worker_id": "w1"}]
    s = common.summarize_objects(objs)["cluster"]
    assert s["total_objects"] == 2 and s["total_size_mb"] == pytest.approx(3.0)
    e = s["summary"]["disabled"]
    assert e["total_num_nodes"] == 2 and e["total_num_workers"] == 1
    assert e["ref_type_counts"] == {"PINNED_IN_MEMORY": 1, "LOCAL_REFERENCE": 1}


def test_every_resource_has_ray_columns():
    assert common.NodeState.list_columns(detail=False)[:4] == ["node_id", "node_ip", "is_head_node", "state"]
    assert {"type", "job_id", "submission_id", "status", "entrypoint"} <= set(common.JobState.list_columns(False))
    assert {"worker_id", "is_alive", "worker_type", "pid"} <= set(common.WorkerState.list_columns(False))
    assert {"object_id", "object_size", "reference_type"} <= set(common.ObjectState.list_columns(False))
    assert {"placement_group_id", "name", "creator_job_id", "state"} == set(
        common.PlacementGroupState.list_columns(False))
