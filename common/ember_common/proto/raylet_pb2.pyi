from . import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class RegisterWorkerRequest(_message.Message):
    __slots__ = ("worker_id", "pid", "port")
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    PORT_FIELD_NUMBER: _ClassVar[int]
    worker_id: str
    pid: int
    port: int
    def __init__(self, worker_id: _Optional[str] = ..., pid: _Optional[int] = ..., port: _Optional[int] = ...) -> None: ...

class RegisterWorkerReply(_message.Message):
    __slots__ = ("node_id", "gcs_address", "objmgr_address", "store_dir", "session_dir")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    GCS_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    OBJMGR_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    STORE_DIR_FIELD_NUMBER: _ClassVar[int]
    SESSION_DIR_FIELD_NUMBER: _ClassVar[int]
    node_id: str
    gcs_address: str
    objmgr_address: str
    store_dir: str
    session_dir: str
    def __init__(self, node_id: _Optional[str] = ..., gcs_address: _Optional[str] = ..., objmgr_address: _Optional[str] = ..., store_dir: _Optional[str] = ..., session_dir: _Optional[str] = ...) -> None: ...

class RequestWorkerLeaseRequest(_message.Message):
    __slots__ = ("lease_id", "resources", "spillback_count", "job_id", "name", "actor_id", "owner_worker_id", "placement_group_id", "placement_group_bundle_index", "serialized_runtime_env", "prefer_here", "label_selector", "retriable", "fallback_label_selectors")
    class ResourcesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    class LabelSelectorEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    RESOURCES_FIELD_NUMBER: _ClassVar[int]
    SPILLBACK_COUNT_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    ACTOR_ID_FIELD_NUMBER: _ClassVar[int]
    OWNER_WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    PLACEMENT_GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    PLACEMENT_GROUP_BUNDLE_INDEX_FIELD_NUMBER: _ClassVar[int]
    SERIALIZED_RUNTIME_ENV_FIELD_NUMBER: _ClassVar[int]
    PREFER_HERE_FIELD_NUMBER: _ClassVar[int]
    LABEL_SELECTOR_FIELD_NUMBER: _ClassVar[int]
    RETRIABLE_FIELD_NUMBER: _ClassVar[int]
    FALLBACK_LABEL_SELECTORS_FIELD_NUMBER: _ClassVar[int]
    lease_id: bytes
    resources: _containers.ScalarMap[str, float]
    spillback_count: int
    job_id: bytes
    name: str
    actor_id: bytes
    owner_worker_id: str
    placement_group_id: bytes
    placement_group_bundle_index: int
    serialized_runtime_env: str
    prefer_here: bool
    label_selector: _containers.ScalarMap[str, str]
    retriable: bool
    fallback_label_selectors: _containers.RepeatedCompositeFieldContainer[_common_pb2.LabelSelector]
    def __init__(self, lease_id: _Optional[bytes] = ..., resources: _Optional[_Mapping[str, float]] = ..., spillback_count: _Optional[int] = ..., job_id: _Optional[bytes] = ..., name: _Optional[str] = ..., actor_id: _Optional[bytes] = ..., owner_worker_id: _Optional[str] = ..., placement_group_id: _Optional[bytes] = ..., placement_group_bundle_index: _Optional[int] = ..., serialized_runtime_env: _Optional[str] = ..., prefer_here: _Optional[bool] = ..., label_selector: _Optional[_Mapping[str, str]] = ..., retriable: _Optional[bool] = ..., fallback_label_selectors: _Optional[_Iterable[_Union[_common_pb2.LabelSelector, _Mapping]]] = ...) -> None: ...

class RequestWorkerLeaseReply(_message.Message):
    __slots__ = ("granted", "spillback", "cancelled")
    GRANTED_FIELD_NUMBER: _ClassVar[int]
    SPILLBACK_FIELD_NUMBER: _ClassVar[int]
    CANCELLED_FIELD_NUMBER: _ClassVar[int]
    granted: Grant
    spillback: Spillback
    cancelled: bool
    def __init__(self, granted: _Optional[_Union[Grant, _Mapping]] = ..., spillback: _Optional[_Union[Spillback, _Mapping]] = ..., cancelled: _Optional[bool] = ...) -> None: ...

class Grant(_message.Message):
    __slots__ = ("worker_address", "gpu_ids", "pid", "capacity")
    WORKER_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    GPU_IDS_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    CAPACITY_FIELD_NUMBER: _ClassVar[int]
    worker_address: _common_pb2.Address
    gpu_ids: _containers.RepeatedScalarFieldContainer[int]
    pid: int
    capacity: int
    def __init__(self, worker_address: _Optional[_Union[_common_pb2.Address, _Mapping]] = ..., gpu_ids: _Optional[_Iterable[int]] = ..., pid: _Optional[int] = ..., capacity: _Optional[int] = ...) -> None: ...

class Spillback(_message.Message):
    __slots__ = ("node_id", "raylet_address")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    RAYLET_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    node_id: str
    raylet_address: str
    def __init__(self, node_id: _Optional[str] = ..., raylet_address: _Optional[str] = ...) -> None: ...

class ReturnWorkerRequest(_message.Message):
    __slots__ = ("lease_id", "disconnect")
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    DISCONNECT_FIELD_NUMBER: _ClassVar[int]
    lease_id: bytes
    disconnect: bool
    def __init__(self, lease_id: _Optional[bytes] = ..., disconnect: _Optional[bool] = ...) -> None: ...

class ReturnWorkerReply(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class CancelWorkerLeaseRequest(_message.Message):
    __slots__ = ("lease_id",)
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    lease_id: bytes
    def __init__(self, lease_id: _Optional[bytes] = ...) -> None: ...

class CancelWorkerLeaseReply(_message.Message):
    __slots__ = ("cancelled",)
    CANCELLED_FIELD_NUMBER: _ClassVar[int]
    cancelled: bool
    def __init__(self, cancelled: _Optional[bool] = ...) -> None: ...

class NotifyWorkerBlockedRequest(_message.Message):
    __slots__ = ("worker_id", "blocked")
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    BLOCKED_FIELD_NUMBER: _ClassVar[int]
    worker_id: str
    blocked: bool
    def __init__(self, worker_id: _Optional[str] = ..., blocked: _Optional[bool] = ...) -> None: ...

class NotifyWorkerBlockedReply(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetNodeStatsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class WorkerStats(_message.Message):
    __slots__ = ("worker_id", "pid", "leased", "task_name")
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    LEASED_FIELD_NUMBER: _ClassVar[int]
    TASK_NAME_FIELD_NUMBER: _ClassVar[int]
    worker_id: str
    pid: int
    leased: bool
    task_name: str
    def __init__(self, worker_id: _Optional[str] = ..., pid: _Optional[int] = ..., leased: _Optional[bool] = ..., task_name: _Optional[str] = ...) -> None: ...

class GetNodeStatsReply(_message.Message):
    __slots__ = ("node_id", "total_resources", "available_resources", "workers", "queued_leases", "bundles")
    class TotalResourcesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    class AvailableResourcesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    TOTAL_RESOURCES_FIELD_NUMBER: _ClassVar[int]
    AVAILABLE_RESOURCES_FIELD_NUMBER: _ClassVar[int]
    WORKERS_FIELD_NUMBER: _ClassVar[int]
    QUEUED_LEASES_FIELD_NUMBER: _ClassVar[int]
    BUNDLES_FIELD_NUMBER: _ClassVar[int]
    node_id: str
    total_resources: _containers.ScalarMap[str, float]
    available_resources: _containers.ScalarMap[str, float]
    workers: _containers.RepeatedCompositeFieldContainer[WorkerStats]
    queued_leases: int
    bundles: _containers.RepeatedCompositeFieldContainer[BundleStats]
    def __init__(self, node_id: _Optional[str] = ..., total_resources: _Optional[_Mapping[str, float]] = ..., available_resources: _Optional[_Mapping[str, float]] = ..., workers: _Optional[_Iterable[_Union[WorkerStats, _Mapping]]] = ..., queued_leases: _Optional[int] = ..., bundles: _Optional[_Iterable[_Union[BundleStats, _Mapping]]] = ...) -> None: ...

class BundleStats(_message.Message):
    __slots__ = ("placement_group_id", "bundle", "committed")
    PLACEMENT_GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    BUNDLE_FIELD_NUMBER: _ClassVar[int]
    COMMITTED_FIELD_NUMBER: _ClassVar[int]
    placement_group_id: bytes
    bundle: _common_pb2.Bundle
    committed: bool
    def __init__(self, placement_group_id: _Optional[bytes] = ..., bundle: _Optional[_Union[_common_pb2.Bundle, _Mapping]] = ..., committed: _Optional[bool] = ...) -> None: ...

class GroupBundles(_message.Message):
    __slots__ = ("placement_group_id", "bundles", "commit")
    PLACEMENT_GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    BUNDLES_FIELD_NUMBER: _ClassVar[int]
    COMMIT_FIELD_NUMBER: _ClassVar[int]
    placement_group_id: bytes
    bundles: _containers.RepeatedCompositeFieldContainer[_common_pb2.Bundle]
    commit: bool
    def __init__(self, placement_group_id: _Optional[bytes] = ..., bundles: _Optional[_Iterable[_Union[_common_pb2.Bundle, _Mapping]]] = ..., commit: _Optional[bool] = ...) -> None: ...

class GroupBundleIndexes(_message.Message):
    __slots__ = ("placement_group_id", "bundle_indexes")
    PLACEMENT_GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    BUNDLE_INDEXES_FIELD_NUMBER: _ClassVar[int]
    placement_group_id: bytes
    bundle_indexes: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, placement_group_id: _Optional[bytes] = ..., bundle_indexes: _Optional[_Iterable[int]] = ...) -> None: ...

class PrepareBundleResourcesRequest(_message.Message):
    __slots__ = ("groups",)
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    groups: _containers.RepeatedCompositeFieldContainer[GroupBundles]
    def __init__(self, groups: _Optional[_Iterable[_Union[GroupBundles, _Mapping]]] = ...) -> None: ...

class PrepareBundleResourcesReply(_message.Message):
    __slots__ = ("success",)
    SUCCESS_FIELD_NUMBER: _ClassVar[int]
    success: _containers.RepeatedScalarFieldContainer[bool]
    def __init__(self, success: _Optional[_Iterable[bool]] = ...) -> None: ...

class CommitBundleResourcesRequest(_message.Message):
    __slots__ = ("groups",)
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    groups: _containers.RepeatedCompositeFieldContainer[GroupBundleIndexes]
    def __init__(self, groups: _Optional[_Iterable[_Union[GroupBundleIndexes, _Mapping]]] = ...) -> None: ...

class CommitBundleResourcesReply(_message.Message):
    __slots__ = ("errors",)
    ERRORS_FIELD_NUMBER: _ClassVar[int]
    errors: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, errors: _Optional[_Iterable[str]] = ...) -> None: ...

class CancelResourceReserveRequest(_message.Message):
    __slots__ = ("groups",)
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    groups: _containers.RepeatedCompositeFieldContainer[GroupBundleIndexes]
    def __init__(self, groups: _Optional[_Iterable[_Union[GroupBundleIndexes, _Mapping]]] = ...) -> None: ...

class CancelResourceReserveReply(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetWorkerFailureCauseRequest(_message.Message):
    __slots__ = ("lease_id",)
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    lease_id: bytes
    def __init__(self, lease_id: _Optional[bytes] = ...) -> None: ...

class WorkerFailureCause(_message.Message):
    __slots__ = ("error_type", "error_message", "fail_task_immediately")
    ERROR_TYPE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    FAIL_TASK_IMMEDIATELY_FIELD_NUMBER: _ClassVar[int]
    error_type: str
    error_message: str
    fail_task_immediately: bool
    def __init__(self, error_type: _Optional[str] = ..., error_message: _Optional[str] = ..., fail_task_immediately: _Optional[bool] = ...) -> None: ...

class GetWorkerFailureCauseReply(_message.Message):
    __slots__ = ("failure_cause",)
    FAILURE_CAUSE_FIELD_NUMBER: _ClassVar[int]
    failure_cause: WorkerFailureCause
    def __init__(self, failure_cause: _Optional[_Union[WorkerFailureCause, _Mapping]] = ...) -> None: ...

class ShutdownRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ShutdownReply(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...
