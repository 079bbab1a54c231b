from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class TaskAttempt(_message.Message):
    __slots__ = ("task_id", "attempt", "state", "name", "func_name", "type", "job_id", "actor_id", "node_id", "worker_id", "pid", "error_type", "error_message", "trace_id", "state_ts_ns")
    class State(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        NIL: _ClassVar[TaskAttempt.State]
        PENDING_ARGS_AVAIL: _ClassVar[TaskAttempt.State]
        PENDING_NODE_ASSIGNMENT: _ClassVar[TaskAttempt.State]
        SUBMITTED_TO_WORKER: _ClassVar[TaskAttempt.State]
        RUNNING: _ClassVar[TaskAttempt.State]
        FINISHED: _ClassVar[TaskAttempt.State]
        FAILED: _ClassVar[TaskAttempt.State]
    NIL: TaskAttempt.State
    PENDING_ARGS_AVAIL: TaskAttempt.State
    PENDING_NODE_ASSIGNMENT: TaskAttempt.State
    SUBMITTED_TO_WORKER: TaskAttempt.State
    RUNNING: TaskAttempt.State
    FINISHED: TaskAttempt.State
    FAILED: TaskAttempt.State
    class Type(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        NORMAL_TASK: _ClassVar[TaskAttempt.Type]
        ACTOR_CREATION_TASK: _ClassVar[TaskAttempt.Type]
        ACTOR_TASK: _ClassVar[TaskAttempt.Type]
    NORMAL_TASK: TaskAttempt.Type
    ACTOR_CREATION_TASK: TaskAttempt.Type
    ACTOR_TASK: TaskAttempt.Type
    class StateTsNsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    FUNC_NAME_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    ACTOR_ID_FIELD_NUMBER: _ClassVar[int]
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    ERROR_TYPE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    TRACE_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_TS_NS_FIELD_NUMBER: _ClassVar[int]
    task_id: bytes
    attempt: int
    state: TaskAttempt.State
    name: str
    func_name: str
    type: TaskAttempt.Type
    job_id: bytes
    actor_id: bytes
    node_id: str
    worker_id: str
    pid: int
    error_type: str
    error_message: str
    trace_id: str
    state_ts_ns: _containers.ScalarMap[str, int]
    def __init__(self, task_id: _Optional[bytes] = ..., attempt: _Optional[int] = ..., state: _Optional[_Union[TaskAttempt.State, str]] = ..., name: _Optional[str] = ..., func_name: _Optional[str] = ..., type: _Optional[_Union[TaskAttempt.Type, str]] = ..., job_id: _Optional[bytes] = ..., actor_id: _Optional[bytes] = ..., node_id: _Optional[str] = ..., worker_id: _Optional[str] = ..., pid: _Optional[int] = ..., error_type: _Optional[str] = ..., error_message: _Optional[str] = ..., trace_id: _Optional[str] = ..., state_ts_ns: _Optional[_Mapping[str, int]] = ...) -> None: ...

class TaskEventBatch(_message.Message):
    __slots__ = ("worker_id", "node_id", "pid", "task_id", "attempt", "ts_ns", "where", "where_node_id", "where_worker_id", "where_pid", "job_id", "name", "type", "actor_id", "trace_id", "error_index", "error_type", "error_message", "trace_parent", "span_resource")
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    TS_NS_FIELD_NUMBER: _ClassVar[int]
    WHERE_FIELD_NUMBER: _ClassVar[int]
    WHERE_NODE_ID_FIELD_NUMBER: _ClassVar[int]
    WHERE_WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    WHERE_PID_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    ACTOR_ID_FIELD_NUMBER: _ClassVar[int]
    TRACE_ID_FIELD_NUMBER: _ClassVar[int]
    ERROR_INDEX_FIELD_NUMBER: _ClassVar[int]
    ERROR_TYPE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    TRACE_PARENT_FIELD_NUMBER: _ClassVar[int]
    SPAN_RESOURCE_FIELD_NUMBER: _ClassVar[int]
    worker_id: str
    node_id: str
    pid: int
    task_id: _containers.RepeatedScalarFieldContainer[bytes]
    attempt: _containers.RepeatedScalarFieldContainer[int]
    ts_ns: _containers.RepeatedScalarFieldContainer[int]
    where: _containers.RepeatedScalarFieldContainer[int]
    where_node_id: _containers.RepeatedScalarFieldContainer[str]
    where_worker_id: _containers.RepeatedScalarFieldContainer[str]
    where_pid: _containers.RepeatedScalarFieldContainer[int]
    job_id: _containers.RepeatedScalarFieldContainer[bytes]
    name: _containers.RepeatedScalarFieldContainer[str]
    type: _containers.RepeatedScalarFieldContainer[TaskAttempt.Type]
    actor_id: _containers.RepeatedScalarFieldContainer[bytes]
    trace_id: _containers.RepeatedScalarFieldContainer[str]
    error_index: _containers.RepeatedScalarFieldContainer[int]
    error_type: _containers.RepeatedScalarFieldContainer[str]
    error_message: _containers.RepeatedScalarFieldContainer[str]
    trace_parent: _containers.RepeatedScalarFieldContainer[bytes]
    span_resource: str
    def __init__(self, worker_id: _Optional[str] = ..., node_id: _Optional[str] = ..., pid: _Optional[int] = ..., task_id: _Optional[_Iterable[bytes]] = ..., attempt: _Optional[_Iterable[int]] = ..., ts_ns: _Optional[_Iterable[int]] = ..., where: _Optional[_Iterable[int]] = ..., where_node_id: _Optional[_Iterable[str]] = ..., where_worker_id: _Optional[_Iterable[str]] = ..., where_pid: _Optional[_Iterable[int]] = ..., job_id: _Optional[_Iterable[bytes]] = ..., name: _Optional[_Iterable[str]] = ..., type: _Optional[_Iterable[_Union[TaskAttempt.Type, str]]] = ..., actor_id: _Optional[_Iterable[bytes]] = ..., trace_id: _Optional[_Iterable[str]] = ..., error_index: _Optional[_Iterable[int]] = ..., error_type: _Optional[_Iterable[str]] = ..., error_message: _Optional[_Iterable[str]] = ..., trace_parent: _Optional[_Iterable[bytes]] = ..., span_resource: _Optional[str] = ...) -> None: ...

class AddTaskEventDataRequest(_message.Message):
    __slots__ = ("batch", "records_by_job", "dropped_by_job", "spans")
    class RecordsByJobEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    class DroppedByJobEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    BATCH_FIELD_NUMBER: _ClassVar[int]
    RECORDS_BY_JOB_FIELD_NUMBER: _ClassVar[int]
    DROPPED_BY_JOB_FIELD_NUMBER: _ClassVar[int]
    SPANS_FIELD_NUMBER: _ClassVar[int]
    batch: bytes
    records_by_job: _containers.ScalarMap[str, int]
    dropped_by_job: _containers.ScalarMap[str, int]
    spans: int
    def __init__(self, batch: _Optional[bytes] = ..., records_by_job: _Optional[_Mapping[str, int]] = ..., dropped_by_job: _Optional[_Mapping[str, int]] = ..., spans: _Optional[int] = ...) -> None: ...

class AddTaskEventDataReply(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class TaskFilter(_message.Message):
    __slots__ = ("column", "predicate", "value")
    COLUMN_FIELD_NUMBER: _ClassVar[int]
    PREDICATE_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    column: str
    predicate: str
    value: str
    def __init__(self, column: _Optional[str] = ..., predicate: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...

class GetTaskEventsRequest(_message.Message):
    __slots__ = ("filters", "limit")
    FILTERS_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    filters: _containers.RepeatedCompositeFieldContainer[TaskFilter]
    limit: int
    def __init__(self, filters: _Optional[_Iterable[_Union[TaskFilter, _Mapping]]] = ..., limit: _Optional[int] = ...) -> None: ...

class GetTaskEventsReply(_message.Message):
    __slots__ = ("tasks", "total", "num_stored", "dropped_by_job", "num_dropped")
    class DroppedByJobEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    TASKS_FIELD_NUMBER: _ClassVar[int]
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    NUM_STORED_FIELD_NUMBER: _ClassVar[int]
    DROPPED_BY_JOB_FIELD_NUMBER: _ClassVar[int]
    NUM_DROPPED_FIELD_NUMBER: _ClassVar[int]
    tasks: _containers.RepeatedCompositeFieldContainer[TaskAttempt]
    total: int
    num_stored: int
    dropped_by_job: _containers.ScalarMap[str, int]
    num_dropped: int
    def __init__(self, tasks: _Optional[_Iterable[_Union[TaskAttempt, _Mapping]]] = ..., total: _Optional[int] = ..., num_stored: _Optional[int] = ..., dropped_by_job: _Optional[_Mapping[str, int]] = ..., num_dropped: _Optional[int] = ...) -> None: ...

class GetTaskSummaryRequest(_message.Message):
    __slots__ = ("filters",)
    FILTERS_FIELD_NUMBER: _ClassVar[int]
    filters: _containers.RepeatedCompositeFieldContainer[TaskFilter]
    def __init__(self, filters: _Optional[_Iterable[_Union[TaskFilter, _Mapping]]] = ...) -> None: ...

class TaskFuncSummary(_message.Message):
    __slots__ = ("func_name", "type", "state_counts")
    class StateCountsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    FUNC_NAME_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    STATE_COUNTS_FIELD_NUMBER: _ClassVar[int]
    func_name: str
    type: TaskAttempt.Type
    state_counts: _containers.ScalarMap[str, int]
    def __init__(self, func_name: _Optional[str] = ..., type: _Optional[_Union[TaskAttempt.Type, str]] = ..., state_counts: _Optional[_Mapping[str, int]] = ...) -> None: ...

class GetTaskSummaryReply(_message.Message):
    __slots__ = ("summary", "total", "num_dropped")
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    NUM_DROPPED_FIELD_NUMBER: _ClassVar[int]
    summary: _containers.RepeatedCompositeFieldContainer[TaskFuncSummary]
    total: int
    num_dropped: int
    def __init__(self, summary: _Optional[_Iterable[_Union[TaskFuncSummary, _Mapping]]] = ..., total: _Optional[int] = ..., num_dropped: _Optional[int] = ...) -> None: ...
