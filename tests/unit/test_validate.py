"""The request rules (ember_common.validate, validate_rules): every rule path exists in the
proto, every unary RPC of every service has rules (or a request with no fields), and the checks
name the bad field."""
from __future__ import annotations

import math

import pytest

from ember_common import ids
from ember_common.proto import common_pb2, core_worker_pb2, gcs_pb2, gcs_task_pb2, objmgr_pb2, raylet_pb2
from ember_common.validate import first_problem, problems
from ember_common.validate_rules import RULES

SERVICE_FILES = (gcs_pb2, gcs_task_pb2, raylet_pb2, objmgr_pb2, core_worker_pb2)


def _unary_request_types() -> dict[str, object]:
    out = {}
    for mod in SERVICE_FILES:
        for service in mod.DESCRIPTOR.services_by_name.values():
            for m in service.methods:
                if not m.client_streaming:
                    out[f"/{service.full_name}/{m.name}"] = m.input_type
    return out


def test_every_rule_path_names_real_fields():
    pool = common_pb2.DESCRIPTOR.pool
    for type_name, rules in RULES.items():
        desc = pool.FindMessageTypeByName(type_name)
        for rule in rules:
            d = desc
            for part in rule.parts:
                name = part.rstrip("[]{}")
                field = d.fields_by_name.get(name)
                assert field is not None, (type_name, rule.path)
                repeated = field.is_repeated
                is_map = field.message_type is not None and field.message_type.GetOptions().map_entry
                if part.endswith("{}"):
                    assert is_map, (type_name, rule.path)
                    field = field.message_type.fields_by_name["value"]
                elif part.endswith("[]"):
                    assert repeated and not is_map, (type_name, rule.path)
                d = field.message_type


def test_every_unary_rpc_with_fields_has_rules():
    missing = [f"{method} ({t.full_name})" for method, t in _unary_request_types().items()
               if t.fields and t.full_name not in RULES]
    assert not missing, missing


TASK_ID = b"t" * ids.TASK_ID_LEN
OID = b"o" * ids.OBJECT_ID_LEN


@pytest.mark.parametrize("msg, expected", [
    (gcs_pb2.RegisterNodeRequest(), "node is required"),
    (gcs_pb2.RegisterNodeRequest(node=common_pb2.NodeInfo(node_id="n1", raylet_address="h:0")),
     "node.raylet_address must end in a port"),
    (gcs_pb2.RegisterNodeRequest(node=common_pb2.NodeInfo(node_id="n1", state=7)), "node.state must be one of"),
    (gcs_pb2.RegisterNodeRequest(node=common_pb2.NodeInfo(node_id="n 1")), "node.node_id must be"),
    (gcs_pb2.ReportHeartbeatRequest(node_id="n", available_resources={"CPU": math.nan}),
     "available_resources ['CPU'] must be a finite amount"),
    (gcs_pb2.KillActorRequest(actor_id=b"abc"), "actor_id must be 16 bytes, got 3"),
    (gcs_pb2.GetActorInfoRequest(actor_id=b"a" * 16, timeout_s=math.nan), "timeout_s must be a number"),
    (gcs_pb2.InternalKVDelRequest(), "key is required"),
    (gcs_pb2.CreatePlacementGroupsRequest(specs=[common_pb2.PlacementGroupInfo(
        placement_group_id=b"p" * 18, strategy=9)]), "specs[0].strategy must be one of"),
    (raylet_pb2.RequestWorkerLeaseRequest(lease_id=b"l" * 16, serialized_runtime_env="{"),
     "serialized_runtime_env is not valid JSON"),
    (objmgr_pb2.GetRequest(object_ids=[OID, b""]), "object_ids[1] must be 20 bytes, got 0"),
    (objmgr_pb2.PullRequest(object_id=OID), "source_address is required"),
    (core_worker_pb2.PushTaskRequest(spec=common_pb2.TaskSpec(task_id=TASK_ID, kwarg_names=["x"])),
     "spec kwarg_names has 1 names for 0 args"),
    (core_worker_pb2.PushTaskRequest(spec=common_pb2.TaskSpec(task_id=TASK_ID, args=[
        common_pb2.TaskArg(ref=common_pb2.ObjectRefProto(object_id=b"x"))])),
     "spec.args[0].ref.object_id must be 20 bytes, got 1"),
    (core_worker_pb2.PushTaskRequest(spec=common_pb2.TaskSpec(
        task_id=TASK_ID, caller=common_pb2.Address(port=70000))), "spec.caller.port must be a port"),
])
def test_a_bad_field_is_named(msg, expected):
    problem = first_problem(msg, RULES)
    assert problem is not None and problem.startswith(expected), problem


@pytest.mark.parametrize("msg", [
    gcs_pb2.RegisterNodeRequest(node=common_pb2.NodeInfo(
        node_id="ab" * 14, raylet_address="10.0.0.1:6380", objmgr_address="[::1]:8076",
        total_resources={"CPU": 2, "GPU": 0.5})),
    gcs_pb2.SubscribeRequest(channels=["nodes", "logs"], job_id=b"\0\0\0\1"),
    raylet_pb2.RequestWorkerLeaseRequest(lease_id=b"l" * 16, resources={"CPU": 1},
                                         serialized_runtime_env='{"env_vars": {}}'),
    core_worker_pb2.PushTaskRequest(spec=common_pb2.TaskSpec(
        task_id=TASK_ID, job_id=b"\0\0\0\1", return_ids=[OID], max_retries=-1, kwarg_names=["a"],
        args=[common_pb2.TaskArg(value=common_pb2.SerializedObject(data=b"x"))])),
    gcs_pb2.GetAllNodeInfoRequest(),
])
def test_well_formed_requests_pass(msg):
    assert list(problems(msg, RULES.get(msg.DESCRIPTOR.full_name, []))) == []
