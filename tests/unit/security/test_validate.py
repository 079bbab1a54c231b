"""The request rules (ember_common.validate, validate_rules): every rule path exists in the
proto, every unary RPC of every service has rules (or a request with no fields), every request
stream is checked, and the checks name the bad field."""
from __future__ import annotations

import math

import pytest
from fuzzing import fill
from google.protobuf.message_factory import GetMessageClass

from ember_common import ids
from ember_common.proto import common_pb2, core_worker_pb2, gcs_pb2, gcs_task_pb2, logs_pb2, objmgr_pb2, raylet_pb2
from ember_common.validate import first_problem, problems
from ember_common.validate_rules import RULES, task_spec_problem

SERVICE_FILES = (gcs_pb2, gcs_task_pb2, raylet_pb2, logs_pb2, objmgr_pb2, core_worker_pb2)


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
     "available_resources ['CPU'] must be an amount in"),
    (gcs_pb2.RegisterNodeRequest(node=common_pb2.NodeInfo(node_id="n1", total_resources={"CPU": 1e308})),
     "node.total_resources ['CPU'] must be an amount in [0, 1.1259e+15], got 1e+308"),
    (gcs_pb2.AddJobRequest(job=common_pb2.JobInfo(start_time=1e308)), "job.start_time must be a time"),
    (gcs_pb2.InternalKVPutRequest(key=b"k" * (100 << 20)), "key must have at most 16384 items"),
    (gcs_pb2.InternalKVKeysRequest(prefix=b"k" * (17 << 10)), "prefix must have at most 16384 items"),
    (gcs_pb2.CreatePlacementGroupRequest(spec=common_pb2.PlacementGroupInfo(
        placement_group_id=b"p" * 18, bundles=[common_pb2.Bundle(index=i, resources={"CPU": 0.001})
                                               for i in range(10_001)])),
     "spec.bundles must have at most 10000 items, got 10001"),
    (gcs_pb2.KillActorRequest(actor_id=b"abc"), "actor_id must be 16 bytes, got 3"),
    (gcs_pb2.GetActorInfoRequest(actor_id=b"a" * 16, timeout_s=math.nan), "timeout_s must be a number"),
    (gcs_pb2.InternalKVDelRequest(), "key is required"),
    (gcs_task_pb2.AddTaskEventDataRequest(batch=b"x", spans=-1), "spans must be"),
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


def test_every_request_stream_is_checked():
    """A request stream's messages have rules (ObjectChunk), or the servicer checks their items
    (TaskBatch: each spec with task_spec_problem, so a bad spec fails only its task)."""
    streamed = {m.input_type.full_name for mod in SERVICE_FILES
                for service in mod.DESCRIPTOR.services_by_name.values()
                for m in service.methods if m.client_streaming}
    assert streamed == {"ember.ObjectChunk", "ember.TaskBatch"}
    assert "ember.ObjectChunk" in RULES and "ember.TaskBatch" not in RULES


@pytest.mark.parametrize("msg, expected", [
    (objmgr_pb2.ObjectChunk(object_id=b"short"), "object_id must be 20 bytes, got 5"),
    (objmgr_pb2.ObjectChunk(offset=-8), "offset must be >= 0, got -8"),
    (objmgr_pb2.ObjectChunk(object_id=OID, total_size=-1), "total_size must be >= 0, got -1"),
])
def test_a_bad_chunk_is_named(msg, expected):
    assert first_problem(msg, RULES) == expected


@pytest.mark.parametrize("spec", [
    common_pb2.TaskSpec(),
    common_pb2.TaskSpec(task_id=b"abc"),
    common_pb2.TaskSpec(task_id=TASK_ID, kwarg_names=["x"]),
    common_pb2.TaskSpec(task_id=TASK_ID, return_ids=[OID, b"x"]),
    common_pb2.TaskSpec(task_id=TASK_ID, resources={"CPU": -1}),
    common_pb2.TaskSpec(task_id=TASK_ID, args=[common_pb2.TaskArg(ref=common_pb2.ObjectRefProto())]),
    common_pb2.TaskSpec(task_id=TASK_ID, actor_creation=common_pb2.ActorCreationSpec(max_restarts=-2)),
    common_pb2.TaskSpec(task_id=TASK_ID, serialized_runtime_env="[]"),
])
def test_a_streamed_spec_is_refused_as_push_task_refuses_it(spec):
    """TaskStream's per-spec check gives the text PushTask's rules give for the same spec."""
    problem = task_spec_problem(spec)
    assert problem is not None and problem == first_problem(core_worker_pb2.PushTaskRequest(spec=spec), RULES)


def test_a_well_formed_streamed_spec_passes():
    spec = common_pb2.TaskSpec(task_id=TASK_ID, job_id=b"\0\0\0\1", return_ids=[OID], kwarg_names=["a"],
                               args=[common_pb2.TaskArg(value=common_pb2.SerializedObject(data=b"x"))])
    assert task_spec_problem(spec) is None


def test_the_compiled_check_agrees_with_the_named_problems():
    """`first` (a generated predicate, then the texts) finds a problem exactly when `problems`
    does, on random messages of every type with rules (and TaskSpecs under TaskStream's rules)."""
    import random

    from ember_common.validate import first
    from ember_common.validate_rules import PUSHED_TASK_SPEC

    rng = random.Random(17)
    pool = common_pb2.DESCRIPTOR.pool
    cases = [(GetMessageClass(pool.FindMessageTypeByName(t)), rules) for t, rules in RULES.items()]
    cases.append((common_pb2.TaskSpec, PUSHED_TASK_SPEC))
    bad = 0
    for cls, rules in cases:
        for _ in range(60):
            msg = fill(cls(), rng)
            expected = next(problems(msg, rules), None)
            assert first(msg, rules) == expected, (msg, expected)
            bad += expected is not None
    assert 0 < bad < 60 * len(cases)  # both verdicts were exercised


def test_precompiled_rules_check_as_the_lazily_compiled_ones():
    """The fork server compiles every loaded type's rules before it forks (validate_rules.
    precompile): each then has its predicate, and checks give the same answers."""
    from ember_common import validate, validate_rules

    assert validate_rules.precompile() == len(RULES) + 1  # every service's module is imported here
    for rules in [*RULES.values(), validate_rules.PUSHED_TASK_SPEC]:
        assert validate._plan(rules).ok is not None
    good = common_pb2.TaskSpec(task_id=ids.new_task_id(), job_id=b"\x01\x00\x00\x00", name="f")
    assert task_spec_problem(good) is None
    assert task_spec_problem(common_pb2.TaskSpec(task_id=b"abc")) == "spec.task_id must be 16 bytes, got 3"
