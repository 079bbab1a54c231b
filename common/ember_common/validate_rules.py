"""The request rules of every Ember service (GCS, raylet and its log service, objmgr, core worker), by request
message full name; `rpc.build_server` applies them through `validate_server.wrap_handler`.

What each rule guards: ids have the length `ember_common.ids` gives them (task 16 bytes, object
20, actor 16, lease 16, placement group 18, job 4; node and worker ids are short text), enums are
values the proto defines, addresses are host:port, resource maps hold finite amounts >= 0, and
the fields a service cannot act without are present. A service still checks what only it can
know (an unknown id is NOT_FOUND, a taken name ALREADY_EXISTS).
"""
from __future__ import annotations

import json
from typing import Any

from . import ids
from .proto import common_pb2
from .validate import (
    REQUIRED,
    Rule,
    address,
    at_least,
    enum_of,
    first,
    id_bytes,
    max_len,
    name_id,
    not_nan,
    port,
    remembered,
    resource_map,
    timestamp,
    under,
)
from .validate import (
    precompile as precompile_rules,
)

TASK_ID = id_bytes(ids.TASK_ID_LEN)
OBJECT_ID = id_bytes(ids.OBJECT_ID_LEN)
ACTOR_ID = id_bytes(ids.ACTOR_ID_LEN)
LEASE_ID = id_bytes(ids.LEASE_ID_LEN)
PG_ID = id_bytes(ids.PLACEMENT_GROUP_ID_LEN)
JOB_ID = id_bytes(ids.JOB_ID_LEN)
TEXT_LIMIT = max_len(1 << 20)  # free text (reasons, entrypoints, log lines): 1 MiB
# Bundles of one placement group: every raylet step over a group costs its size, and one request
# must not hold a node's event loop for long.
MAX_BUNDLES_PER_GROUP = 10_000
BUNDLES_LIMIT = max_len(MAX_BUNDLES_PER_GROUP)
# Groups in one placement-group batch call, to the GCS or a raylet (the clients send bigger
# batches in calls this big: gcs_pg_client, raylet_client).
MAX_GROUPS_PER_REQUEST = 1_000
GROUPS_LIMIT = max_len(MAX_GROUPS_PER_REQUEST)
# Internal KV keys and namespaces are names (function ids, Serve and Tune state paths), not data.
KV_KEY_LIMIT = max_len(16 << 10)


@remembered
def json_object(v: Any) -> str | None:
    """Canonical JSON of an object (a serialized runtime env)."""
    try:
        return None if isinstance(json.loads(v), dict) else "must be a JSON object"
    except ValueError as e:
        return f"is not valid JSON ({e})"


def job_end_state(v: Any) -> str | None:
    """How a job ended: "" (SUCCEEDED), SUCCEEDED, FAILED or STOPPED."""
    return None if v in ("", "SUCCEEDED", "FAILED", "STOPPED") else f"must be SUCCEEDED, FAILED or STOPPED, got {v[:40]!r}"


def kwargs_fit(spec: Any) -> str | None:
    """A task's keyword names name its last arguments, so there are no more names than args."""
    if len(spec.kwarg_names) > len(spec.args):
        return f"kwarg_names has {len(spec.kwarg_names)} names for {len(spec.args)} args"
    return None


ADDRESS = [Rule("node_id", name_id), Rule("ip", name_id), Rule("port", port), Rule("worker_id", name_id)]
RETURN_OBJECT = [Rule("object_id", OBJECT_ID), Rule("node_id", name_id), Rule("size", at_least(0))]
OBJECT_REF = [Rule("object_id", REQUIRED), Rule("object_id", OBJECT_ID), *under("owner", ADDRESS),
              *under("resolved", RETURN_OBJECT)]
ACTOR_CREATION = [Rule("max_restarts", at_least(-1)), Rule("max_task_retries", at_least(-1)),
                  Rule("max_concurrency", at_least(0)), Rule("owner_node_id", name_id),
                  Rule("concurrency_groups{}", at_least(1))]
TASK_SPEC = [
    Rule("task_id", TASK_ID), Rule("job_id", JOB_ID),
    Rule("", kwargs_fit), *under("args[].ref", OBJECT_REF), Rule("return_ids[]", OBJECT_ID),
    Rule("resources", resource_map), Rule("max_retries", at_least(-1)), Rule("attempt", at_least(0)),
    *under("caller", ADDRESS), Rule("gpu_ids[]", at_least(0)), Rule("actor_id", ACTOR_ID),
    *under("actor_creation", ACTOR_CREATION), Rule("placement_group_id", PG_ID),
    Rule("placement_group_bundle_index", at_least(-1)), Rule("serialized_runtime_env", json_object),
]
NODE_INFO = [
    Rule("node_id", REQUIRED), Rule("node_id", name_id), Rule("raylet_address", address),
    Rule("objmgr_address", address), Rule("ip", name_id), Rule("total_resources", resource_map),
    Rule("available_resources", resource_map), Rule("state", enum_of(common_pb2.NodeInfo.State)),
    Rule("object_store_memory", at_least(0)),
]
PLACEMENT_GROUP_IDS = [Rule("placement_group_id", REQUIRED), Rule("placement_group_id", PG_ID),
                       Rule("strategy", enum_of(common_pb2.PlacementGroupInfo.Strategy)),
                       Rule("state", enum_of(common_pb2.PlacementGroupInfo.State)), Rule("job_id", JOB_ID)]
PLACEMENT_GROUP = [*PLACEMENT_GROUP_IDS, Rule("bundles", BUNDLES_LIMIT), Rule("bundles[].index", at_least(0)),
                   Rule("bundles[].resources", resource_map), Rule("bundles[].node_id", name_id)]
KEYED = [Rule("key", REQUIRED), Rule("key", KV_KEY_LIMIT), Rule("namespace", KV_KEY_LIMIT)]
NEEDS_PG_ID = [Rule("placement_group_id", REQUIRED), Rule("placement_group_id", PG_ID)]


def _kv_del(msg: Any) -> str | None:
    return None if msg.key or msg.del_by_prefix else "key is required (an empty key deletes nothing)"


GCS: dict[str, list[Rule]] = {
    "RegisterNodeRequest": [Rule("node", REQUIRED), *under("node", NODE_INFO)],
    "UnregisterNodeRequest": [Rule("node_id", REQUIRED), Rule("node_id", name_id), Rule("reason", TEXT_LIMIT)],
    "ReportHeartbeatRequest": [Rule("node_id", REQUIRED), Rule("node_id", name_id),
                               Rule("available_resources", resource_map), Rule("total_resources", resource_map)],
    "AddJobRequest": [Rule("job", REQUIRED), Rule("job.driver_ip", name_id), Rule("job.driver_pid", at_least(0)),
                      Rule("job.driver_worker_id", name_id), Rule("job.entrypoint", TEXT_LIMIT),
                      Rule("job.ray_namespace", max_len(4096)), Rule("job.start_time", timestamp), Rule("job.end_time", timestamp)],
    "MarkJobFinishedRequest": [Rule("job_id", REQUIRED), Rule("job_id", JOB_ID), Rule("end_state", job_end_state),
                               Rule("end_message", TEXT_LIMIT)],
    "RegisterActorRequest": [Rule("creation_spec", REQUIRED), Rule("creation_spec.actor_id", REQUIRED),
                             Rule("creation_spec.actor_creation", REQUIRED), *under("creation_spec", TASK_SPEC)],
    "GetActorInfoRequest": [Rule("actor_id", REQUIRED), Rule("actor_id", ACTOR_ID), Rule("timeout_s", not_nan)],
    "GetNamedActorInfoRequest": [Rule("name", REQUIRED)],
    "KillActorRequest": [Rule("actor_id", REQUIRED), Rule("actor_id", ACTOR_ID)],
    "ReportWorkerFailureRequest": [Rule("worker_id", REQUIRED), Rule("worker_id", name_id),
                                   Rule("node_id", name_id), Rule("reason", TEXT_LIMIT)],
    "InternalKVGetRequest": KEYED, "InternalKVPutRequest": KEYED, "InternalKVExistsRequest": KEYED,
    "InternalKVDelRequest": [Rule("", _kv_del), Rule("key", KV_KEY_LIMIT), Rule("namespace", KV_KEY_LIMIT)],
    # any namespace and prefix (empty: every key) is a fair question
    "InternalKVKeysRequest": [Rule("prefix", KV_KEY_LIMIT), Rule("namespace", KV_KEY_LIMIT)],
    "SubscribeRequest": [Rule("channels", REQUIRED), Rule("channels[]", name_id), Rule("job_id", JOB_ID)],
    "PublishLogsRequest": [Rule("batches[].job_id", JOB_ID), Rule("batches[].node_id", name_id),
                           Rule("batches[].pid", at_least(0))],
    "CreatePlacementGroupRequest": [Rule("spec", REQUIRED), *under("spec", PLACEMENT_GROUP)],
    # Bad bundles of one spec are that spec's errors[i]; ids and enums must hold for all.
    "CreatePlacementGroupsRequest": [Rule("specs", GROUPS_LIMIT), *under("specs[]", PLACEMENT_GROUP_IDS)],
    "RemovePlacementGroupRequest": NEEDS_PG_ID,
    "RemovePlacementGroupsRequest": [Rule("placement_group_ids", GROUPS_LIMIT), Rule("placement_group_ids[]", PG_ID)],
    "GetPlacementGroupRequest": NEEDS_PG_ID,
    "GetNamedPlacementGroupRequest": [Rule("name", REQUIRED)],
    "WaitPlacementGroupUntilReadyRequest": [*NEEDS_PG_ID, Rule("timeout_s", not_nan),
                                            Rule("also_report[]", PG_ID)],
}
# Task events (proto/gcs_task.proto): a batch's columns carry task ids, attempts and enums the
# store indexes; a filter names its column (the store answers INVALID_ARGUMENT for an unknown one).
TASK_FILTERS = [Rule("filters[].column", REQUIRED), Rule("filters[].value", max_len(1024))]
GCS_TASK: dict[str, list[Rule]] = {
    # The columns themselves (thousands of events a batch) are checked by the store in one pass
    # (equal lengths; unknown states ignored), not element by element here: this RPC is the
    # task hot path's only cost in the GCS.
    # The batch is bytes the store decodes when a query needs it (and drops, counted, if it
    # cannot); here only its presence.
    # spans: how many records carry spans the GCS decodes the batch for (tracing's derived spans).
    "AddTaskEventDataRequest": [Rule("batch", REQUIRED), Rule("spans", at_least(0))],
    "GetTaskEventsRequest": [*TASK_FILTERS, Rule("limit", at_least(0))],
    "GetTaskSummaryRequest": TASK_FILTERS,
}
GROUP_INDEXES = [Rule("groups", GROUPS_LIMIT), Rule("groups[].placement_group_id", REQUIRED),
                 Rule("groups[].placement_group_id", PG_ID), Rule("groups[].bundle_indexes", BUNDLES_LIMIT),
                 Rule("groups[].bundle_indexes[]", at_least(-1))]
RAYLET: dict[str, list[Rule]] = {
    "RegisterWorkerRequest": [Rule("worker_id", REQUIRED), Rule("worker_id", name_id),
                              Rule("pid", at_least(0)), Rule("port", port)],
    "RequestWorkerLeaseRequest": [
        Rule("lease_id", REQUIRED), Rule("lease_id", LEASE_ID), Rule("resources", resource_map),
        Rule("spillback_count", at_least(0)), Rule("job_id", JOB_ID), Rule("actor_id", ACTOR_ID),
        Rule("owner_worker_id", name_id), Rule("placement_group_id", PG_ID),
        Rule("placement_group_bundle_index", at_least(-1)), Rule("serialized_runtime_env", json_object)],
    "ReturnWorkerRequest": [Rule("lease_id", REQUIRED), Rule("lease_id", LEASE_ID)],
    "CancelWorkerLeaseRequest": [Rule("lease_id", REQUIRED), Rule("lease_id", LEASE_ID)],
    "GetWorkerFailureCauseRequest": [Rule("lease_id", REQUIRED), Rule("lease_id", LEASE_ID)],
    "NotifyWorkerBlockedRequest": [Rule("worker_id", REQUIRED), Rule("worker_id", name_id)],
    "PrepareBundleResourcesRequest": [
        Rule("groups", GROUPS_LIMIT), Rule("groups[].placement_group_id", REQUIRED), Rule("groups[].placement_group_id", PG_ID),
        Rule("groups[].bundles", BUNDLES_LIMIT), Rule("groups[].bundles[].index", at_least(0)),
        Rule("groups[].bundles[].resources", resource_map)],
    "CommitBundleResourcesRequest": GROUP_INDEXES,
    "CancelResourceReserveRequest": GROUP_INDEXES,
}
# The raylet's log service (logs.proto): names are checked against the log directory by the
# service itself (log_files.resolve); here only their size.
LOGS: dict[str, list[Rule]] = {
    "ListLogsRequest": [Rule("glob", max_len(255))],
    "StreamLogRequest": [Rule("filename", max_len(255)), Rule("pid", at_least(0)), Rule("suffix", max_len(3)),
                         Rule("interval_s", not_nan)],
}
NEEDS_OBJECT_ID = [Rule("object_id", REQUIRED), Rule("object_id", OBJECT_ID)]
OBJMGR: dict[str, list[Rule]] = {
    "CreateRequest": [*NEEDS_OBJECT_ID, Rule("size", at_least(0)), Rule("owner_worker_id", name_id),
                      Rule("client_id", name_id)],
    "SealRequest": NEEDS_OBJECT_ID,
    "GetRequest": [Rule("object_ids[]", OBJECT_ID), Rule("client_id", name_id)],
    "ReleaseRequest": [Rule("object_ids[]", OBJECT_ID), Rule("client_id", name_id)],
    "PullRequest": [*NEEDS_OBJECT_ID, Rule("source_address", REQUIRED), Rule("source_address", address),
                    Rule("owner_worker_id", name_id)],
    "ReadObjectRequest": NEEDS_OBJECT_ID,
    "ReadRangeRequest": [*NEEDS_OBJECT_ID, Rule("offset", at_least(0)), Rule("length", at_least(0))],
    "FreeRequest": [Rule("object_ids[]", OBJECT_ID)],
    # Each message of a WriteObject stream (the servicer checks the first one names the object
    # and that every chunk lies inside it: that needs the stream's first message).
    "ObjectChunk": [Rule("object_id", OBJECT_ID), Rule("total_size", at_least(0)), Rule("offset", at_least(0)),
                    Rule("owner_worker_id", name_id)],
}
NESTED = [Rule("outer_id", OBJECT_ID), *under("owner", ADDRESS), Rule("object_ids[]", OBJECT_ID)]
CORE_WORKER: dict[str, list[Rule]] = {
    "PushTaskRequest": [Rule("spec", REQUIRED), Rule("spec.task_id", REQUIRED), *under("spec", TASK_SPEC)],
    "GetObjectRequest": [*NEEDS_OBJECT_ID, Rule("timeout_s", not_nan)],
    "CancelTaskRequest": [Rule("task_id", REQUIRED), Rule("task_id", TASK_ID)],
    "ReportGeneratorItemRequest": [Rule("task_id", REQUIRED), Rule("task_id", TASK_ID),
                                   Rule("index", at_least(0)), *under("item", RETURN_OBJECT),
                                   *under("nested[]", NESTED)],
    "BorrowerRequest": [Rule("object_ids[]", OBJECT_ID), Rule("borrower_worker_id", REQUIRED),
                        Rule("borrower_worker_id", name_id)],
    "AddObjectLocationRequest": [*NEEDS_OBJECT_ID, Rule("node_id", REQUIRED), Rule("node_id", name_id)],
}

# TaskStream's TaskBatch has no rules of its own (it is parsed leniently): each of its specs is
# checked by the worker, and a bad one fails only its task (the others in the batch run).
PUSHED_TASK_SPEC = [Rule("task_id", REQUIRED), *TASK_SPEC]  # PushTaskRequest's spec, unwrapped


def task_spec_problem(spec: Any) -> str | None:
    """What is wrong with a TaskSpec pushed over TaskStream, naming the field as PushTask's
    rules do (``spec.task_id must be 16 bytes, got 3``), or None."""
    return first(spec, PUSHED_TASK_SPEC, "spec.")


# Full message name -> rules (every service's messages are in package `ember`).
RULES: dict[str, list[Rule]] = {f"ember.{name}": rules for table in (GCS, GCS_TASK, RAYLET, LOGS, OBJMGR,
                                                                             CORE_WORKER)
                                for name, rules in table.items()}


def precompile() -> int:
    """Compiles the rules of every message type loaded in this process (and the pushed task
    spec's), as validate.precompile; returns how many types."""
    from google.protobuf import descriptor_pool

    pool = descriptor_pool.Default()
    done = 0
    for name, rules in RULES.items():
        try:
            desc = pool.FindMessageTypeByName(name)
        except KeyError:  # its service's module is not imported here
            continue
        precompile_rules(rules, desc)
        done += 1
    precompile_rules(PUSHED_TASK_SPEC, common_pb2.TaskSpec.DESCRIPTOR)
    return done + 1
