from . import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class AddObjectLocationRequest(_message.Message):
    __slots__ = ("object_id", "node_id")
    OBJECT_ID_FIELD_NUMBER: _ClassVar[int]
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    object_id: bytes
    node_id: str
    def __init__(self, object_id: _Optional[bytes] = ..., node_id: _Optional[str] = ...) -> None: ...

class AddObjectLocationReply(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class NestedRefs(_message.Message):
    __slots__ = ("outer_id", "owner", "object_ids")
    OUTER_ID_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    OBJECT_IDS_FIELD_NUMBER: _ClassVar[int]
    outer_id: bytes
    owner: _common_pb2.Address
    object_ids: _containers.RepeatedScalarFieldContainer[bytes]
    def __init__(self, outer_id: _Optional[bytes] = ..., owner: _Optional[_Union[_common_pb2.Address, _Mapping]] = ..., object_ids: _Optional[_Iterable[bytes]] = ...) -> None: ...

class BorrowerRequest(_message.Message):
    __slots__ = ("object_ids", "borrower_worker_id")
    OBJECT_IDS_FIELD_NUMBER: _ClassVar[int]
    BORROWER_WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    object_ids: _containers.RepeatedScalarFieldContainer[bytes]
    borrower_worker_id: str
    def __init__(self, object_ids: _Optional[_Iterable[bytes]] = ..., borrower_worker_id: _Optional[str] = ...) -> None: ...

class AddBorrowerReply(_message.Message):
    __slots__ = ("unknown_ids",)
    UNKNOWN_IDS_FIELD_NUMBER: _ClassVar[int]
    unknown_ids: _containers.RepeatedScalarFieldContainer[bytes]
    def __init__(self, unknown_ids: _Optional[_Iterable[bytes]] = ...) -> None: ...

class RemoveBorrowerReply(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class PushTaskRequest(_message.Message):
    __slots__ = ("spec",)
    SPEC_FIELD_NUMBER: _ClassVar[int]
    spec: _common_pb2.TaskSpec
    def __init__(self, spec: _Optional[_Union[_common_pb2.TaskSpec, _Mapping]] = ...) -> None: ...

class PushTaskReply(_message.Message):
    __slots__ = ("returns", "is_application_error", "error_message", "num_streamed", "nested", "returned_unstarted", "start_time_ns", "end_time_ns", "refused", "exec_span_left")
    RETURNS_FIELD_NUMBER: _ClassVar[int]
    IS_APPLICATION_ERROR_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    NUM_STREAMED_FIELD_NUMBER: _ClassVar[int]
    NESTED_FIELD_NUMBER: _ClassVar[int]
    RETURNED_UNSTARTED_FIELD_NUMBER: _ClassVar[int]
    START_TIME_NS_FIELD_NUMBER: _ClassVar[int]
    END_TIME_NS_FIELD_NUMBER: _ClassVar[int]
    REFUSED_FIELD_NUMBER: _ClassVar[int]
    EXEC_SPAN_LEFT_FIELD_NUMBER: _ClassVar[int]
    returns: _containers.RepeatedCompositeFieldContainer[_common_pb2.ReturnObject]
    is_application_error: bool
    error_message: str
    num_streamed: int
    nested: _containers.RepeatedCompositeFieldContainer[NestedRefs]
    returned_unstarted: bool
    start_time_ns: int
    end_time_ns: int
    refused: bool
    exec_span_left: bool
    def __init__(self, returns: _Optional[_Iterable[_Union[_common_pb2.ReturnObject, _Mapping]]] = ..., is_application_error: _Optional[bool] = ..., error_message: _Optional[str] = ..., num_streamed: _Optional[int] = ..., nested: _Optional[_Iterable[_Union[NestedRefs, _Mapping]]] = ..., returned_unstarted: _Optional[bool] = ..., start_time_ns: _Optional[int] = ..., end_time_ns: _Optional[int] = ..., refused: _Optional[bool] = ..., exec_span_left: _Optional[bool] = ...) -> None: ...

class ReportGeneratorItemRequest(_message.Message):
    __slots__ = ("task_id", "index", "item", "nested")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    ITEM_FIELD_NUMBER: _ClassVar[int]
    NESTED_FIELD_NUMBER: _ClassVar[int]
    task_id: bytes
    index: int
    item: _common_pb2.ReturnObject
    nested: _containers.RepeatedCompositeFieldContainer[NestedRefs]
    def __init__(self, task_id: _Optional[bytes] = ..., index: _Optional[int] = ..., item: _Optional[_Union[_common_pb2.ReturnObject, _Mapping]] = ..., nested: _Optional[_Iterable[_Union[NestedRefs, _Mapping]]] = ...) -> None: ...

class ReportGeneratorItemReply(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class TaskBatch(_message.Message):
    __slots__ = ("specs", "give_back")
    SPECS_FIELD_NUMBER: _ClassVar[int]
    GIVE_BACK_FIELD_NUMBER: _ClassVar[int]
    specs: _containers.RepeatedCompositeFieldContainer[_common_pb2.TaskSpec]
    give_back: bool
    def __init__(self, specs: _Optional[_Iterable[_Union[_common_pb2.TaskSpec, _Mapping]]] = ..., give_back: _Optional[bool] = ...) -> None: ...

class TaskStreamReply(_message.Message):
    __slots__ = ("task_id", "reply")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    REPLY_FIELD_NUMBER: _ClassVar[int]
    task_id: bytes
    reply: PushTaskReply
    def __init__(self, task_id: _Optional[bytes] = ..., reply: _Optional[_Union[PushTaskReply, _Mapping]] = ...) -> None: ...

class TaskReplyBatch(_message.Message):
    __slots__ = ("replies",)
    REPLIES_FIELD_NUMBER: _ClassVar[int]
    replies: _containers.RepeatedCompositeFieldContainer[TaskStreamReply]
    def __init__(self, replies: _Optional[_Iterable[_Union[TaskStreamReply, _Mapping]]] = ...) -> None: ...

class DirectEndpointRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class DirectEndpointReply(_message.Message):
    __slots__ = ("port", "secret")
    PORT_FIELD_NUMBER: _ClassVar[int]
    SECRET_FIELD_NUMBER: _ClassVar[int]
    port: int
    secret: bytes
    def __init__(self, port: _Optional[int] = ..., secret: _Optional[bytes] = ...) -> None: ...

class GetObjectRequest(_message.Message):
    __slots__ = ("object_id", "timeout_s")
    OBJECT_ID_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_S_FIELD_NUMBER: _ClassVar[int]
    object_id: bytes
    timeout_s: float
    def __init__(self, object_id: _Optional[bytes] = ..., timeout_s: _Optional[float] = ...) -> None: ...

class GetObjectReply(_message.Message):
    __slots__ = ("status", "object", "copy_node_ids")
    class Status(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        READY: _ClassVar[GetObjectReply.Status]
        TIMEOUT: _ClassVar[GetObjectReply.Status]
        NOT_FOUND: _ClassVar[GetObjectReply.Status]
    READY: GetObjectReply.Status
    TIMEOUT: GetObjectReply.Status
    NOT_FOUND: GetObjectReply.Status
    STATUS_FIELD_NUMBER: _ClassVar[int]
    OBJECT_FIELD_NUMBER: _ClassVar[int]
    COPY_NODE_IDS_FIELD_NUMBER: _ClassVar[int]
    status: GetObjectReply.Status
    object: _common_pb2.ReturnObject
    copy_node_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, status: _Optional[_Union[GetObjectReply.Status, str]] = ..., object: _Optional[_Union[_common_pb2.ReturnObject, _Mapping]] = ..., copy_node_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class CancelTaskRequest(_message.Message):
    __slots__ = ("task_id", "force", "recursive")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    FORCE_FIELD_NUMBER: _ClassVar[int]
    RECURSIVE_FIELD_NUMBER: _ClassVar[int]
    task_id: bytes
    force: bool
    recursive: bool
    def __init__(self, task_id: _Optional[bytes] = ..., force: _Optional[bool] = ..., recursive: _Optional[bool] = ...) -> None: ...

class CancelTaskReply(_message.Message):
    __slots__ = ("attempted",)
    ATTEMPTED_FIELD_NUMBER: _ClassVar[int]
    attempted: bool
    def __init__(self, attempted: _Optional[bool] = ...) -> None: ...

class ExitRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ExitReply(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...
