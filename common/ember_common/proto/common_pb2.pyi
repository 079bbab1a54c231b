from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Address(_message.Message):
    __slots__ = ("node_id", "ip", "port", "worker_id")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    IP_FIELD_NUMBER: _ClassVar[int]
    PORT_FIELD_NUMBER: _ClassVar[int]
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    node_id: str
    ip: str
    port: int
    worker_id: str
    def __init__(self, node_id: _Optional[str] = ..., ip: _Optional[str] = ..., port: _Optional[int] = ..., worker_id: _Optional[str] = ...) -> None: ...

class SerializedObject(_message.Message):
    __slots__ = ("data", "buffers", "metadata")
    DATA_FIELD_NUMBER: _ClassVar[int]
    BUFFERS_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    buffers: _containers.RepeatedScalarFieldContainer[bytes]
    metadata: str
    def __init__(self, data: _Optional[bytes] = ..., buffers: _Optional[_Iterable[bytes]] = ..., metadata: _Optional[str] = ...) -> None: ...

class ObjectRefProto(_message.Message):
    __slots__ = ("object_id", "owner", "resolved")
    OBJECT_ID_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    RESOLVED_FIELD_NUMBER: _ClassVar[int]
    object_id: bytes
    owner: Address
    resolved: ReturnObject
    def __init__(self, object_id: _Optional[bytes] = ..., owner: _Optional[_Union[Address, _Mapping]] = ..., resolved: _Optional[_Union[ReturnObject, _Mapping]] = ...) -> None: ...

class ReturnObject(_message.Message):
    __slots__ = ("object_id", "value", "in_plasma", "node_id", "size")
    OBJECT_ID_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    IN_PLASMA_FIELD_NUMBER: _ClassVar[int]
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    object_id: bytes
    value: SerializedObject
    in_plasma: bool
    node_id: str
    size: int
    def __init__(self, object_id: _Optional[bytes] = ..., value: _Optional[_Union[SerializedObject, _Mapping]] = ..., in_plasma: _Optional[bool] = ..., node_id: _Optional[str] = ..., size: _Optional[int] = ...) -> None: ...

class FunctionDescriptor(_message.Message):
    __slots__ = ("module", "qualname", "function_id")
    MODULE_FIELD_NUMBER: _ClassVar[int]
    QUALNAME_FIELD_NUMBER: _ClassVar[int]
    FUNCTION_ID_FIELD_NUMBER: _ClassVar[int]
    module: str
    qualname: str
    function_id: str
    def __init__(self, module: _Optional[str] = ..., qualname: _Optional[str] = ..., function_id: _Optional[str] = ...) -> None: ...

class TaskArg(_message.Message):
    __slots__ = ("value", "ref")
    VALUE_FIELD_NUMBER: _ClassVar[int]
    REF_FIELD_NUMBER: _ClassVar[int]
    value: SerializedObject
    ref: ObjectRefProto
    def __init__(self, value: _Optional[_Union[SerializedObject, _Mapping]] = ..., ref: _Optional[_Union[ObjectRefProto, _Mapping]] = ...) -> None: ...

class TaskSpec(_message.Message):
    __slots__ = ("task_id", "job_id", "name", "function", "args", "kwarg_names", "return_ids", "resources", "max_retries", "retry_exceptions", "attempt", "caller", "gpu_ids", "actor_id", "actor_creation", "method_name", "seq_no", "lowest_unacked", "streaming", "placement_group_id", "placement_group_bundle_index", "placement_group_capture_child_tasks", "concurrency_group", "serialized_runtime_env", "trace_parent", "labels")
    class ResourcesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    FUNCTION_FIELD_NUMBER: _ClassVar[int]
    ARGS_FIELD_NUMBER: _ClassVar[int]
    KWARG_NAMES_FIELD_NUMBER: _ClassVar[int]
    RETURN_IDS_FIELD_NUMBER: _ClassVar[int]
    RESOURCES_FIELD_NUMBER: _ClassVar[int]
    MAX_RETRIES_FIELD_NUMBER: _ClassVar[int]
    RETRY_EXCEPTIONS_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    CALLER_FIELD_NUMBER: _ClassVar[int]
    GPU_IDS_FIELD_NUMBER: _ClassVar[int]
    ACTOR_ID_FIELD_NUMBER: _ClassVar[int]
    ACTOR_CREATION_FIELD_NUMBER: _ClassVar[int]
    METHOD_NAME_FIELD_NUMBER: _ClassVar[int]
    SEQ_NO_FIELD_NUMBER: _ClassVar[int]
    LOWEST_UNACKED_FIELD_NUMBER: _ClassVar[int]
    STREAMING_FIELD_NUMBER: _ClassVar[int]
    PLACEMENT_GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    PLACEMENT_GROUP_BUNDLE_INDEX_FIELD_NUMBER: _ClassVar[int]
    PLACEMENT_GROUP_CAPTURE_CHILD_TASKS_FIELD_NUMBER: _ClassVar[int]
    CONCURRENCY_GROUP_FIELD_NUMBER: _ClassVar[int]
    SERIALIZED_RUNTIME_ENV_FIELD_NUMBER: _ClassVar[int]
    TRACE_PARENT_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    task_id: bytes
    job_id: bytes
    name: str
    function: FunctionDescriptor
    args: _containers.RepeatedCompositeFieldContainer[TaskArg]
    kwarg_names: _containers.RepeatedScalarFieldContainer[str]
    return_ids: _containers.RepeatedScalarFieldContainer[bytes]
    resources: _containers.ScalarMap[str, float]
    max_retries: int
    retry_exceptions: bool
    attempt: int
    caller: Address
    gpu_ids: _containers.RepeatedScalarFieldContainer[int]
    actor_id: bytes
    actor_creation: ActorCreationSpec
    method_name: str
    seq_no: int
    lowest_unacked: int
    streaming: bool
    placement_group_id: bytes
    placement_group_bundle_index: int
    placement_group_capture_child_tasks: bool
    concurrency_group: str
    serialized_runtime_env: str
    trace_parent: bytes
    labels: LabelPlacement
    def __init__(self, task_id: _Optional[bytes] = ..., job_id: _Optional[bytes] = ..., name: _Optional[str] = ..., function: _Optional[_Union[FunctionDescriptor, _Mapping]] = ..., args: _Optional[_Iterable[_Union[TaskArg, _Mapping]]] = ..., kwarg_names: _Optional[_Iterable[str]] = ..., return_ids: _Optional[_Iterable[bytes]] = ..., resources: _Optional[_Mapping[str, float]] = ..., max_retries: _Optional[int] = ..., retry_exceptions: _Optional[bool] = ..., attempt: _Optional[int] = ..., caller: _Optional[_Union[Address, _Mapping]] = ..., gpu_ids: _Optional[_Iterable[int]] = ..., actor_id: _Optional[bytes] = ..., actor_creation: _Optional[_Union[ActorCreationSpec, _Mapping]] = ..., method_name: _Optional[str] = ..., seq_no: _Optional[int] = ..., lowest_unacked: _Optional[int] = ..., streaming: _Optional[bool] = ..., placement_group_id: _Optional[bytes] = ..., placement_group_bundle_index: _Optional[int] = ..., placement_group_capture_child_tasks: _Optional[bool] = ..., concurrency_group: _Optional[str] = ..., serialized_runtime_env: _Optional[str] = ..., trace_parent: _Optional[bytes] = ..., labels: _Optional[_Union[LabelPlacement, _Mapping]] = ...) -> None: ...

class LabelPlacement(_message.Message):
    __slots__ = ("label_selector", "fallback_strategy")
    class LabelSelectorEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    LABEL_SELECTOR_FIELD_NUMBER: _ClassVar[int]
    FALLBACK_STRATEGY_FIELD_NUMBER: _ClassVar[int]
    label_selector: _containers.ScalarMap[str, str]
    fallback_strategy: _containers.RepeatedCompositeFieldContainer[LabelSelector]
    def __init__(self, label_selector: _Optional[_Mapping[str, str]] = ..., fallback_strategy: _Optional[_Iterable[_Union[LabelSelector, _Mapping]]] = ...) -> None: ...

class LabelSelector(_message.Message):
    __slots__ = ("selector",)
    class SelectorEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    SELECTOR_FIELD_NUMBER: _ClassVar[int]
    selector: _containers.ScalarMap[str, str]
    def __init__(self, selector: _Optional[_Mapping[str, str]] = ...) -> None: ...

class ActorMethod(_message.Message):
    __slots__ = ("name", "num_returns", "is_async", "is_generator", "concurrency_group")
    NAME_FIELD_NUMBER: _ClassVar[int]
    NUM_RETURNS_FIELD_NUMBER: _ClassVar[int]
    IS_ASYNC_FIELD_NUMBER: _ClassVar[int]
    IS_GENERATOR_FIELD_NUMBER: _ClassVar[int]
    CONCURRENCY_GROUP_FIELD_NUMBER: _ClassVar[int]
    name: str
    num_returns: int
    is_async: bool
    is_generator: bool
    concurrency_group: str
    def __init__(self, name: _Optional[str] = ..., num_returns: _Optional[int] = ..., is_async: _Optional[bool] = ..., is_generator: _Optional[bool] = ..., concurrency_group: _Optional[str] = ...) -> None: ...

class ActorCreationSpec(_message.Message):
    __slots__ = ("max_restarts", "max_task_retries", "max_concurrency", "name", "namespace", "detached", "is_async", "class_name", "methods", "owner_node_id", "concurrency_groups")
    class ConcurrencyGroupsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    MAX_RESTARTS_FIELD_NUMBER: _ClassVar[int]
    MAX_TASK_RETRIES_FIELD_NUMBER: _ClassVar[int]
    MAX_CONCURRENCY_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    DETACHED_FIELD_NUMBER: _ClassVar[int]
    IS_ASYNC_FIELD_NUMBER: _ClassVar[int]
    CLASS_NAME_FIELD_NUMBER: _ClassVar[int]
    METHODS_FIELD_NUMBER: _ClassVar[int]
    OWNER_NODE_ID_FIELD_NUMBER: _ClassVar[int]
    CONCURRENCY_GROUPS_FIELD_NUMBER: _ClassVar[int]
    max_restarts: int
    max_task_retries: int
    max_concurrency: int
    name: str
    namespace: str
    detached: bool
    is_async: bool
    class_name: str
    methods: _containers.RepeatedCompositeFieldContainer[ActorMethod]
    owner_node_id: str
    concurrency_groups: _containers.ScalarMap[str, int]
    def __init__(self, max_restarts: _Optional[int] = ..., max_task_retries: _Optional[int] = ..., max_concurrency: _Optional[int] = ..., name: _Optional[str] = ..., namespace: _Optional[str] = ..., detached: _Optional[bool] = ..., is_async: _Optional[bool] = ..., class_name: _Optional[str] = ..., methods: _Optional[_Iterable[_Union[ActorMethod, _Mapping]]] = ..., owner_node_id: _Optional[str] = ..., concurrency_groups: _Optional[_Mapping[str, int]] = ...) -> None: ...

class ActorInfo(_message.Message):
    __slots__ = ("actor_id", "state", "address", "name", "namespace", "class_name", "num_restarts", "job_id", "death_cause", "creation_spec", "incarnation", "lease_id", "raylet_address", "pid")
    class State(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        PENDING_CREATION: _ClassVar[ActorInfo.State]
        ALIVE: _ClassVar[ActorInfo.State]
        RESTARTING: _ClassVar[ActorInfo.State]
        DEAD: _ClassVar[ActorInfo.State]
    PENDING_CREATION: ActorInfo.State
    ALIVE: ActorInfo.State
    RESTARTING: ActorInfo.State
    DEAD: ActorInfo.State
    ACTOR_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    CLASS_NAME_FIELD_NUMBER: _ClassVar[int]
    NUM_RESTARTS_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    DEATH_CAUSE_FIELD_NUMBER: _ClassVar[int]
    CREATION_SPEC_FIELD_NUMBER: _ClassVar[int]
    INCARNATION_FIELD_NUMBER: _ClassVar[int]
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    RAYLET_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    actor_id: bytes
    state: ActorInfo.State
    address: Address
    name: str
    namespace: str
    class_name: str
    num_restarts: int
    job_id: bytes
    death_cause: str
    creation_spec: TaskSpec
    incarnation: int
    lease_id: bytes
    raylet_address: str
    pid: int
    def __init__(self, actor_id: _Optional[bytes] = ..., state: _Optional[_Union[ActorInfo.State, str]] = ..., address: _Optional[_Union[Address, _Mapping]] = ..., name: _Optional[str] = ..., namespace: _Optional[str] = ..., class_name: _Optional[str] = ..., num_restarts: _Optional[int] = ..., job_id: _Optional[bytes] = ..., death_cause: _Optional[str] = ..., creation_spec: _Optional[_Union[TaskSpec, _Mapping]] = ..., incarnation: _Optional[int] = ..., lease_id: _Optional[bytes] = ..., raylet_address: _Optional[str] = ..., pid: _Optional[int] = ...) -> None: ...

class NodeInfo(_message.Message):
    __slots__ = ("node_id", "raylet_address", "objmgr_address", "ip", "hostname", "total_resources", "available_resources", "state", "start_time", "death_reason", "is_head", "store_dir", "object_store_memory", "labels")
    class State(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        ALIVE: _ClassVar[NodeInfo.State]
        DEAD: _ClassVar[NodeInfo.State]
    ALIVE: NodeInfo.State
    DEAD: NodeInfo.State
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
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    RAYLET_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    OBJMGR_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    IP_FIELD_NUMBER: _ClassVar[int]
    HOSTNAME_FIELD_NUMBER: _ClassVar[int]
    TOTAL_RESOURCES_FIELD_NUMBER: _ClassVar[int]
    AVAILABLE_RESOURCES_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    START_TIME_FIELD_NUMBER: _ClassVar[int]
    DEATH_REASON_FIELD_NUMBER: _ClassVar[int]
    IS_HEAD_FIELD_NUMBER: _ClassVar[int]
    STORE_DIR_FIELD_NUMBER: _ClassVar[int]
    OBJECT_STORE_MEMORY_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    node_id: str
    raylet_address: str
    objmgr_address: str
    ip: str
    hostname: str
    total_resources: _containers.ScalarMap[str, float]
    available_resources: _containers.ScalarMap[str, float]
    state: NodeInfo.State
    start_time: float
    death_reason: str
    is_head: bool
    store_dir: str
    object_store_memory: int
    labels: _containers.ScalarMap[str, str]
    def __init__(self, node_id: _Optional[str] = ..., raylet_address: _Optional[str] = ..., objmgr_address: _Optional[str] = ..., ip: _Optional[str] = ..., hostname: _Optional[str] = ..., total_resources: _Optional[_Mapping[str, float]] = ..., available_resources: _Optional[_Mapping[str, float]] = ..., state: _Optional[_Union[NodeInfo.State, str]] = ..., start_time: _Optional[float] = ..., death_reason: _Optional[str] = ..., is_head: _Optional[bool] = ..., store_dir: _Optional[str] = ..., object_store_memory: _Optional[int] = ..., labels: _Optional[_Mapping[str, str]] = ...) -> None: ...

class JobInfo(_message.Message):
    __slots__ = ("job_id", "driver_ip", "driver_pid", "start_time", "end_time", "is_dead", "entrypoint", "driver_worker_id", "end_state", "end_message", "ray_namespace")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    DRIVER_IP_FIELD_NUMBER: _ClassVar[int]
    DRIVER_PID_FIELD_NUMBER: _ClassVar[int]
    START_TIME_FIELD_NUMBER: _ClassVar[int]
    END_TIME_FIELD_NUMBER: _ClassVar[int]
    IS_DEAD_FIELD_NUMBER: _ClassVar[int]
    ENTRYPOINT_FIELD_NUMBER: _ClassVar[int]
    DRIVER_WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    END_STATE_FIELD_NUMBER: _ClassVar[int]
    END_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    RAY_NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    job_id: bytes
    driver_ip: str
    driver_pid: int
    start_time: float
    end_time: float
    is_dead: bool
    entrypoint: str
    driver_worker_id: str
    end_state: str
    end_message: str
    ray_namespace: str
    def __init__(self, job_id: _Optional[bytes] = ..., driver_ip: _Optional[str] = ..., driver_pid: _Optional[int] = ..., start_time: _Optional[float] = ..., end_time: _Optional[float] = ..., is_dead: _Optional[bool] = ..., entrypoint: _Optional[str] = ..., driver_worker_id: _Optional[str] = ..., end_state: _Optional[str] = ..., end_message: _Optional[str] = ..., ray_namespace: _Optional[str] = ...) -> None: ...

class Bundle(_message.Message):
    __slots__ = ("index", "resources", "node_id", "label_selector")
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
    INDEX_FIELD_NUMBER: _ClassVar[int]
    RESOURCES_FIELD_NUMBER: _ClassVar[int]
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    LABEL_SELECTOR_FIELD_NUMBER: _ClassVar[int]
    index: int
    resources: _containers.ScalarMap[str, float]
    node_id: str
    label_selector: _containers.ScalarMap[str, str]
    def __init__(self, index: _Optional[int] = ..., resources: _Optional[_Mapping[str, float]] = ..., node_id: _Optional[str] = ..., label_selector: _Optional[_Mapping[str, str]] = ...) -> None: ...

class PlacementGroupInfo(_message.Message):
    __slots__ = ("placement_group_id", "name", "namespace", "strategy", "bundles", "state", "job_id", "detached", "state_message", "create_time", "placement_version")
    class Strategy(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        PACK: _ClassVar[PlacementGroupInfo.Strategy]
        SPREAD: _ClassVar[PlacementGroupInfo.Strategy]
        STRICT_PACK: _ClassVar[PlacementGroupInfo.Strategy]
        STRICT_SPREAD: _ClassVar[PlacementGroupInfo.Strategy]
    PACK: PlacementGroupInfo.Strategy
    SPREAD: PlacementGroupInfo.Strategy
    STRICT_PACK: PlacementGroupInfo.Strategy
    STRICT_SPREAD: PlacementGroupInfo.Strategy
    class State(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        PENDING: _ClassVar[PlacementGroupInfo.State]
        PREPARED: _ClassVar[PlacementGroupInfo.State]
        CREATED: _ClassVar[PlacementGroupInfo.State]
        REMOVED: _ClassVar[PlacementGroupInfo.State]
        RESCHEDULING: _ClassVar[PlacementGroupInfo.State]
    PENDING: PlacementGroupInfo.State
    PREPARED: PlacementGroupInfo.State
    CREATED: PlacementGroupInfo.State
    REMOVED: PlacementGroupInfo.State
    RESCHEDULING: PlacementGroupInfo.State
    PLACEMENT_GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    STRATEGY_FIELD_NUMBER: _ClassVar[int]
    BUNDLES_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    DETACHED_FIELD_NUMBER: _ClassVar[int]
    STATE_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    PLACEMENT_VERSION_FIELD_NUMBER: _ClassVar[int]
    placement_group_id: bytes
    name: str
    namespace: str
    strategy: PlacementGroupInfo.Strategy
    bundles: _containers.RepeatedCompositeFieldContainer[Bundle]
    state: PlacementGroupInfo.State
    job_id: bytes
    detached: bool
    state_message: str
    create_time: float
    placement_version: int
    def __init__(self, placement_group_id: _Optional[bytes] = ..., name: _Optional[str] = ..., namespace: _Optional[str] = ..., strategy: _Optional[_Union[PlacementGroupInfo.Strategy, str]] = ..., bundles: _Optional[_Iterable[_Union[Bundle, _Mapping]]] = ..., state: _Optional[_Union[PlacementGroupInfo.State, str]] = ..., job_id: _Optional[bytes] = ..., detached: _Optional[bool] = ..., state_message: _Optional[str] = ..., create_time: _Optional[float] = ..., placement_version: _Optional[int] = ...) -> None: ...
