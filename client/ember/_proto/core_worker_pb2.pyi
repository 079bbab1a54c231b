from . import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class PushTaskRequest(_message.Message):
    __slots__ = ("spec",)
    SPEC_FIELD_NUMBER: _ClassVar[int]
    spec: _common_pb2.TaskSpec
    def __init__(self, spec: _Optional[_Union[_common_pb2.TaskSpec, _Mapping]] = ...) -> None: ...

class PushTaskReply(_message.Message):
    __slots__ = ("returns", "is_application_error", "error_message", "num_streamed")
    RETURNS_FIELD_NUMBER: _ClassVar[int]
    IS_APPLICATION_ERROR_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    NUM_STREAMED_FIELD_NUMBER: _ClassVar[int]
    returns: _containers.RepeatedCompositeFieldContainer[_common_pb2.ReturnObject]
    is_application_error: bool
    error_message: str
    num_streamed: int
    def __init__(self, returns: _Optional[_Iterable[_Union[_common_pb2.ReturnObject, _Mapping]]] = ..., is_application_error: _Optional[bool] = ..., error_message: _Optional[str] = ..., num_streamed: _Optional[int] = ...) -> None: ...

class ReportGeneratorItemRequest(_message.Message):
    __slots__ = ("task_id", "index", "item")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    ITEM_FIELD_NUMBER: _ClassVar[int]
    task_id: bytes
    index: int
    item: _common_pb2.ReturnObject
    def __init__(self, task_id: _Optional[bytes] = ..., index: _Optional[int] = ..., item: _Optional[_Union[_common_pb2.ReturnObject, _Mapping]] = ...) -> None: ...

class ReportGeneratorItemReply(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class TaskBatch(_message.Message):
    __slots__ = ("specs",)
    SPECS_FIELD_NUMBER: _ClassVar[int]
    specs: _containers.RepeatedCompositeFieldContainer[_common_pb2.TaskSpec]
    def __init__(self, specs: _Optional[_Iterable[_Union[_common_pb2.TaskSpec, _Mapping]]] = ...) -> None: ...

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

class GetObjectRequest(_message.Message):
    __slots__ = ("object_id", "timeout_s")
    OBJECT_ID_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_S_FIELD_NUMBER: _ClassVar[int]
    object_id: bytes
    timeout_s: float
    def __init__(self, object_id: _Optional[bytes] = ..., timeout_s: _Optional[float] = ...) -> None: ...

class GetObjectReply(_message.Message):
    __slots__ = ("status", "object")
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
    status: GetObjectReply.Status
    object: _common_pb2.ReturnObject
    def __init__(self, status: _Optional[_Union[GetObjectReply.Status, str]] = ..., object: _Optional[_Union[_common_pb2.ReturnObject, _Mapping]] = ...) -> None: ...

class CancelTaskRequest(_message.Message):
    __slots__ = ("task_id", "force")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    FORCE_FIELD_NUMBER: _ClassVar[int]
    task_id: bytes
    force: bool
    def __init__(self, task_id: _Optional[bytes] = ..., force: _Optional[bool] = ...) -> None: ...

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
