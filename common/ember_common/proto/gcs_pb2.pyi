from . import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class RegisterNodeRequest(_message.Message):
    __slots__ = ("node",)
    NODE_FIELD_NUMBER: _ClassVar[int]
    node: _common_pb2.NodeInfo
    def __init__(self, node: _Optional[_Union[_common_pb2.NodeInfo, _Mapping]] = ...) -> None: ...

class RegisterNodeReply(_message.Message):
    __slots__ = ("cluster_id",)
    CLUSTER_ID_FIELD_NUMBER: _ClassVar[int]
    cluster_id: str
    def __init__(self, cluster_id: _Optional[str] = ...) -> None: ...

class ReportHeartbeatRequest(_message.Message):
    __slots__ = ("node_id", "available_resources", "total_resources", "delta", "removed_resources", "seq", "base_seq")
    class AvailableResourcesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    class TotalResourcesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    AVAILABLE_RESOURCES_FIELD_NUMBER: _ClassVar[int]
    TOTAL_RESOURCES_FIELD_NUMBER: _ClassVar[int]
    DELTA_FIELD_NUMBER: _ClassVar[int]
    REMOVED_RESOURCES_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    BASE_SEQ_FIELD_NUMBER: _ClassVar[int]
    node_id: str
    available_resources: _containers.ScalarMap[str, float]
    total_resources: _containers.ScalarMap[str, float]
    delta: bool
    removed_resources: _containers.RepeatedScalarFieldContainer[str]
    seq: int
    base_seq: int
    def __init__(self, node_id: _Optional[str] = ..., available_resources: _Optional[_Mapping[str, float]] = ..., total_resources: _Optional[_Mapping[str, float]] = ..., delta: _Optional[bool] = ..., removed_resources: _Optional[_Iterable[str]] = ..., seq: _Optional[int] = ..., base_seq: _Optional[int] = ...) -> None: ...

class ReportHeartbeatReply(_message.Message):
    __slots__ = ("resend_full",)
    RESEND_FULL_FIELD_NUMBER: _ClassVar[int]
    resend_full: bool
    def __init__(self, resend_full: _Optional[bool] = ...) -> None: ...

class UnregisterNodeRequest(_message.Message):
    __slots__ = ("node_id", "reason")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    node_id: str
    reason: str
    def __init__(self, node_id: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class UnregisterNodeReply(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetAllNodeInfoRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetAllNodeInfoReply(_message.Message):
    __slots__ = ("nodes",)
    NODES_FIELD_NUMBER: _ClassVar[int]
    nodes: _containers.RepeatedCompositeFieldContainer[_common_pb2.NodeInfo]
    def __init__(self, nodes: _Optional[_Iterable[_Union[_common_pb2.NodeInfo, _Mapping]]] = ...) -> None: ...

class SubscribeRequest(_message.Message):
    __slots__ = ("channels", "job_id")
    CHANNELS_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    channels: _containers.RepeatedScalarFieldContainer[str]
    job_id: bytes
    def __init__(self, channels: _Optional[_Iterable[str]] = ..., job_id: _Optional[bytes] = ...) -> None: ...

class LogBatch(_message.Message):
    __slots__ = ("job_id", "node_id", "pid", "name", "is_err", "lines")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    IS_ERR_FIELD_NUMBER: _ClassVar[int]
    LINES_FIELD_NUMBER: _ClassVar[int]
    job_id: bytes
    node_id: str
    pid: int
    name: str
    is_err: bool
    lines: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, job_id: _Optional[bytes] = ..., node_id: _Optional[str] = ..., pid: _Optional[int] = ..., name: _Optional[str] = ..., is_err: _Optional[bool] = ..., lines: _Optional[_Iterable[str]] = ...) -> None: ...

class WorkerDeath(_message.Message):
    __slots__ = ("worker_id", "node_id", "reason")
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    worker_id: str
    node_id: str
    reason: str
    def __init__(self, worker_id: _Optional[str] = ..., node_id: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class PubMessage(_message.Message):
    __slots__ = ("node", "logs", "worker_death", "node_resources")
    NODE_FIELD_NUMBER: _ClassVar[int]
    LOGS_FIELD_NUMBER: _ClassVar[int]
    WORKER_DEATH_FIELD_NUMBER: _ClassVar[int]
    NODE_RESOURCES_FIELD_NUMBER: _ClassVar[int]
    node: _common_pb2.NodeInfo
    logs: LogBatch
    worker_death: WorkerDeath
    node_resources: NodeResourcesDelta
    def __init__(self, node: _Optional[_Union[_common_pb2.NodeInfo, _Mapping]] = ..., logs: _Optional[_Union[LogBatch, _Mapping]] = ..., worker_death: _Optional[_Union[WorkerDeath, _Mapping]] = ..., node_resources: _Optional[_Union[NodeResourcesDelta, _Mapping]] = ...) -> None: ...

class NodeResourcesDelta(_message.Message):
    __slots__ = ("node_id", "available_resources", "total_resources", "removed_resources")
    class AvailableResourcesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    class TotalResourcesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    AVAILABLE_RESOURCES_FIELD_NUMBER: _ClassVar[int]
    TOTAL_RESOURCES_FIELD_NUMBER: _ClassVar[int]
    REMOVED_RESOURCES_FIELD_NUMBER: _ClassVar[int]
    node_id: str
    available_resources: _containers.ScalarMap[str, float]
    total_resources: _containers.ScalarMap[str, float]
    removed_resources: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, node_id: _Optional[str] = ..., available_resources: _Optional[_Mapping[str, float]] = ..., total_resources: _Optional[_Mapping[str, float]] = ..., removed_resources: _Optional[_Iterable[str]] = ...) -> None: ...

class PublishLogsRequest(_message.Message):
    __slots__ = ("batches",)
    BATCHES_FIELD_NUMBER: _ClassVar[int]
    batches: _containers.RepeatedCompositeFieldContainer[LogBatch]
    def __init__(self, batches: _Optional[_Iterable[_Union[LogBatch, _Mapping]]] = ...) -> None: ...

class PublishLogsReply(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class AddJobRequest(_message.Message):
    __slots__ = ("job",)
    JOB_FIELD_NUMBER: _ClassVar[int]
    job: _common_pb2.JobInfo
    def __init__(self, job: _Optional[_Union[_common_pb2.JobInfo, _Mapping]] = ...) -> None: ...

class AddJobReply(_message.Message):
    __slots__ = ("job_id",)
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: bytes
    def __init__(self, job_id: _Optional[bytes] = ...) -> None: ...

class MarkJobFinishedRequest(_message.Message):
    __slots__ = ("job_id", "end_state", "end_message")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    END_STATE_FIELD_NUMBER: _ClassVar[int]
    END_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    job_id: bytes
    end_state: str
    end_message: str
    def __init__(self, job_id: _Optional[bytes] = ..., end_state: _Optional[str] = ..., end_message: _Optional[str] = ...) -> None: ...

class MarkJobFinishedReply(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetAllJobInfoRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetAllJobInfoReply(_message.Message):
    __slots__ = ("jobs",)
    JOBS_FIELD_NUMBER: _ClassVar[int]
    jobs: _containers.RepeatedCompositeFieldContainer[_common_pb2.JobInfo]
    def __init__(self, jobs: _Optional[_Iterable[_Union[_common_pb2.JobInfo, _Mapping]]] = ...) -> None: ...

class RegisterActorRequest(_message.Message):
    __slots__ = ("creation_spec",)
    CREATION_SPEC_FIELD_NUMBER: _ClassVar[int]
    creation_spec: _common_pb2.TaskSpec
    def __init__(self, creation_spec: _Optional[_Union[_common_pb2.TaskSpec, _Mapping]] = ...) -> None: ...

class RegisterActorReply(_message.Message):
    __slots__ = ("actor",)
    ACTOR_FIELD_NUMBER: _ClassVar[int]
    actor: _common_pb2.ActorInfo
    def __init__(self, actor: _Optional[_Union[_common_pb2.ActorInfo, _Mapping]] = ...) -> None: ...

class GetActorInfoRequest(_message.Message):
    __slots__ = ("actor_id", "wait_for_change", "after_incarnation", "timeout_s")
    ACTOR_ID_FIELD_NUMBER: _ClassVar[int]
    WAIT_FOR_CHANGE_FIELD_NUMBER: _ClassVar[int]
    AFTER_INCARNATION_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_S_FIELD_NUMBER: _ClassVar[int]
    actor_id: bytes
    wait_for_change: bool
    after_incarnation: int
    timeout_s: float
    def __init__(self, actor_id: _Optional[bytes] = ..., wait_for_change: _Optional[bool] = ..., after_incarnation: _Optional[int] = ..., timeout_s: _Optional[float] = ...) -> None: ...

class GetActorInfoReply(_message.Message):
    __slots__ = ("actor",)
    ACTOR_FIELD_NUMBER: _ClassVar[int]
    actor: _common_pb2.ActorInfo
    def __init__(self, actor: _Optional[_Union[_common_pb2.ActorInfo, _Mapping]] = ...) -> None: ...

class GetNamedActorInfoRequest(_message.Message):
    __slots__ = ("name", "namespace")
    NAME_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    name: str
    namespace: str
    def __init__(self, name: _Optional[str] = ..., namespace: _Optional[str] = ...) -> None: ...

class GetNamedActorInfoReply(_message.Message):
    __slots__ = ("actor",)
    ACTOR_FIELD_NUMBER: _ClassVar[int]
    actor: _common_pb2.ActorInfo
    def __init__(self, actor: _Optional[_Union[_common_pb2.ActorInfo, _Mapping]] = ...) -> None: ...

class GetAllActorInfoRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetAllActorInfoReply(_message.Message):
    __slots__ = ("actors",)
    ACTORS_FIELD_NUMBER: _ClassVar[int]
    actors: _containers.RepeatedCompositeFieldContainer[_common_pb2.ActorInfo]
    def __init__(self, actors: _Optional[_Iterable[_Union[_common_pb2.ActorInfo, _Mapping]]] = ...) -> None: ...

class KillActorRequest(_message.Message):
    __slots__ = ("actor_id", "no_restart", "out_of_scope")
    ACTOR_ID_FIELD_NUMBER: _ClassVar[int]
    NO_RESTART_FIELD_NUMBER: _ClassVar[int]
    OUT_OF_SCOPE_FIELD_NUMBER: _ClassVar[int]
    actor_id: bytes
    no_restart: bool
    out_of_scope: bool
    def __init__(self, actor_id: _Optional[bytes] = ..., no_restart: _Optional[bool] = ..., out_of_scope: _Optional[bool] = ...) -> None: ...

class KillActorReply(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ReportWorkerFailureRequest(_message.Message):
    __slots__ = ("worker_id", "node_id", "reason", "intentional")
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    INTENTIONAL_FIELD_NUMBER: _ClassVar[int]
    worker_id: str
    node_id: str
    reason: str
    intentional: bool
    def __init__(self, worker_id: _Optional[str] = ..., node_id: _Optional[str] = ..., reason: _Optional[str] = ..., intentional: _Optional[bool] = ...) -> None: ...

class ReportWorkerFailureReply(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class InternalKVGetRequest(_message.Message):
    __slots__ = ("namespace", "key")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    key: bytes
    def __init__(self, namespace: _Optional[str] = ..., key: _Optional[bytes] = ...) -> None: ...

class InternalKVGetReply(_message.Message):
    __slots__ = ("value",)
    VALUE_FIELD_NUMBER: _ClassVar[int]
    value: bytes
    def __init__(self, value: _Optional[bytes] = ...) -> None: ...

class InternalKVPutRequest(_message.Message):
    __slots__ = ("namespace", "key", "value", "overwrite")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    OVERWRITE_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    key: bytes
    value: bytes
    overwrite: bool
    def __init__(self, namespace: _Optional[str] = ..., key: _Optional[bytes] = ..., value: _Optional[bytes] = ..., overwrite: _Optional[bool] = ...) -> None: ...

class InternalKVPutReply(_message.Message):
    __slots__ = ("added",)
    ADDED_FIELD_NUMBER: _ClassVar[int]
    added: bool
    def __init__(self, added: _Optional[bool] = ...) -> None: ...

class InternalKVDelRequest(_message.Message):
    __slots__ = ("namespace", "key", "del_by_prefix")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    DEL_BY_PREFIX_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    key: bytes
    del_by_prefix: bool
    def __init__(self, namespace: _Optional[str] = ..., key: _Optional[bytes] = ..., del_by_prefix: _Optional[bool] = ...) -> None: ...

class InternalKVDelReply(_message.Message):
    __slots__ = ("deleted_num",)
    DELETED_NUM_FIELD_NUMBER: _ClassVar[int]
    deleted_num: int
    def __init__(self, deleted_num: _Optional[int] = ...) -> None: ...

class InternalKVKeysRequest(_message.Message):
    __slots__ = ("namespace", "prefix")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    PREFIX_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    prefix: bytes
    def __init__(self, namespace: _Optional[str] = ..., prefix: _Optional[bytes] = ...) -> None: ...

class InternalKVKeysReply(_message.Message):
    __slots__ = ("keys",)
    KEYS_FIELD_NUMBER: _ClassVar[int]
    keys: _containers.RepeatedScalarFieldContainer[bytes]
    def __init__(self, keys: _Optional[_Iterable[bytes]] = ...) -> None: ...

class InternalKVExistsRequest(_message.Message):
    __slots__ = ("namespace", "key")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    key: bytes
    def __init__(self, namespace: _Optional[str] = ..., key: _Optional[bytes] = ...) -> None: ...

class InternalKVExistsReply(_message.Message):
    __slots__ = ("exists",)
    EXISTS_FIELD_NUMBER: _ClassVar[int]
    exists: bool
    def __init__(self, exists: _Optional[bool] = ...) -> None: ...

class CreatePlacementGroupRequest(_message.Message):
    __slots__ = ("spec",)
    SPEC_FIELD_NUMBER: _ClassVar[int]
    spec: _common_pb2.PlacementGroupInfo
    def __init__(self, spec: _Optional[_Union[_common_pb2.PlacementGroupInfo, _Mapping]] = ...) -> None: ...

class CreatePlacementGroupReply(_message.Message):
    __slots__ = ("placement_group",)
    PLACEMENT_GROUP_FIELD_NUMBER: _ClassVar[int]
    placement_group: _common_pb2.PlacementGroupInfo
    def __init__(self, placement_group: _Optional[_Union[_common_pb2.PlacementGroupInfo, _Mapping]] = ...) -> None: ...

class RemovePlacementGroupRequest(_message.Message):
    __slots__ = ("placement_group_id",)
    PLACEMENT_GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    placement_group_id: bytes
    def __init__(self, placement_group_id: _Optional[bytes] = ...) -> None: ...

class RemovePlacementGroupReply(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetPlacementGroupRequest(_message.Message):
    __slots__ = ("placement_group_id",)
    PLACEMENT_GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    placement_group_id: bytes
    def __init__(self, placement_group_id: _Optional[bytes] = ...) -> None: ...

class GetPlacementGroupReply(_message.Message):
    __slots__ = ("placement_group",)
    PLACEMENT_GROUP_FIELD_NUMBER: _ClassVar[int]
    placement_group: _common_pb2.PlacementGroupInfo
    def __init__(self, placement_group: _Optional[_Union[_common_pb2.PlacementGroupInfo, _Mapping]] = ...) -> None: ...

class GetNamedPlacementGroupRequest(_message.Message):
    __slots__ = ("name", "namespace")
    NAME_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    name: str
    namespace: str
    def __init__(self, name: _Optional[str] = ..., namespace: _Optional[str] = ...) -> None: ...

class GetNamedPlacementGroupReply(_message.Message):
    __slots__ = ("placement_group",)
    PLACEMENT_GROUP_FIELD_NUMBER: _ClassVar[int]
    placement_group: _common_pb2.PlacementGroupInfo
    def __init__(self, placement_group: _Optional[_Union[_common_pb2.PlacementGroupInfo, _Mapping]] = ...) -> None: ...

class GetAllPlacementGroupRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetAllPlacementGroupReply(_message.Message):
    __slots__ = ("placement_groups",)
    PLACEMENT_GROUPS_FIELD_NUMBER: _ClassVar[int]
    placement_groups: _containers.RepeatedCompositeFieldContainer[_common_pb2.PlacementGroupInfo]
    def __init__(self, placement_groups: _Optional[_Iterable[_Union[_common_pb2.PlacementGroupInfo, _Mapping]]] = ...) -> None: ...

class WaitPlacementGroupUntilReadyRequest(_message.Message):
    __slots__ = ("placement_group_id", "timeout_s", "also_report")
    PLACEMENT_GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_S_FIELD_NUMBER: _ClassVar[int]
    ALSO_REPORT_FIELD_NUMBER: _ClassVar[int]
    placement_group_id: bytes
    timeout_s: float
    also_report: _containers.RepeatedScalarFieldContainer[bytes]
    def __init__(self, placement_group_id: _Optional[bytes] = ..., timeout_s: _Optional[float] = ..., also_report: _Optional[_Iterable[bytes]] = ...) -> None: ...

class WaitPlacementGroupUntilReadyReply(_message.Message):
    __slots__ = ("ready", "placement_group", "ready_ids")
    READY_FIELD_NUMBER: _ClassVar[int]
    PLACEMENT_GROUP_FIELD_NUMBER: _ClassVar[int]
    READY_IDS_FIELD_NUMBER: _ClassVar[int]
    ready: bool
    placement_group: _common_pb2.PlacementGroupInfo
    ready_ids: _containers.RepeatedScalarFieldContainer[bytes]
    def __init__(self, ready: _Optional[bool] = ..., placement_group: _Optional[_Union[_common_pb2.PlacementGroupInfo, _Mapping]] = ..., ready_ids: _Optional[_Iterable[bytes]] = ...) -> None: ...

class CreatePlacementGroupsRequest(_message.Message):
    __slots__ = ("specs",)
    SPECS_FIELD_NUMBER: _ClassVar[int]
    specs: _containers.RepeatedCompositeFieldContainer[_common_pb2.PlacementGroupInfo]
    def __init__(self, specs: _Optional[_Iterable[_Union[_common_pb2.PlacementGroupInfo, _Mapping]]] = ...) -> None: ...

class CreatePlacementGroupsReply(_message.Message):
    __slots__ = ("errors",)
    ERRORS_FIELD_NUMBER: _ClassVar[int]
    errors: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, errors: _Optional[_Iterable[str]] = ...) -> None: ...

class RemovePlacementGroupsRequest(_message.Message):
    __slots__ = ("placement_group_ids",)
    PLACEMENT_GROUP_IDS_FIELD_NUMBER: _ClassVar[int]
    placement_group_ids: _containers.RepeatedScalarFieldContainer[bytes]
    def __init__(self, placement_group_ids: _Optional[_Iterable[bytes]] = ...) -> None: ...

class RemovePlacementGroupsReply(_message.Message):
    __slots__ = ("not_found",)
    NOT_FOUND_FIELD_NUMBER: _ClassVar[int]
    not_found: _containers.RepeatedScalarFieldContainer[bytes]
    def __init__(self, not_found: _Optional[_Iterable[bytes]] = ...) -> None: ...
