from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable
from typing import ClassVar as _ClassVar, Optional as _Optional

DESCRIPTOR: _descriptor.FileDescriptor

class SealRequest(_message.Message):
    __slots__ = ("object_id", "size")
    OBJECT_ID_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    object_id: bytes
    size: int
    def __init__(self, object_id: _Optional[bytes] = ..., size: _Optional[int] = ...) -> None: ...

class SealReply(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class PullRequest(_message.Message):
    __slots__ = ("object_id", "source_address")
    OBJECT_ID_FIELD_NUMBER: _ClassVar[int]
    SOURCE_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    object_id: bytes
    source_address: str
    def __init__(self, object_id: _Optional[bytes] = ..., source_address: _Optional[str] = ...) -> None: ...

class PullReply(_message.Message):
    __slots__ = ("size",)
    SIZE_FIELD_NUMBER: _ClassVar[int]
    size: int
    def __init__(self, size: _Optional[int] = ...) -> None: ...

class ReadObjectRequest(_message.Message):
    __slots__ = ("object_id",)
    OBJECT_ID_FIELD_NUMBER: _ClassVar[int]
    object_id: bytes
    def __init__(self, object_id: _Optional[bytes] = ...) -> None: ...

class ObjectChunk(_message.Message):
    __slots__ = ("total_size", "offset", "data")
    TOTAL_SIZE_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    total_size: int
    offset: int
    data: bytes
    def __init__(self, total_size: _Optional[int] = ..., offset: _Optional[int] = ..., data: _Optional[bytes] = ...) -> None: ...

class FreeRequest(_message.Message):
    __slots__ = ("object_ids",)
    OBJECT_IDS_FIELD_NUMBER: _ClassVar[int]
    object_ids: _containers.RepeatedScalarFieldContainer[bytes]
    def __init__(self, object_ids: _Optional[_Iterable[bytes]] = ...) -> None: ...

class FreeReply(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetStoreStatsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetStoreStatsReply(_message.Message):
    __slots__ = ("used_bytes", "capacity_bytes", "num_objects")
    USED_BYTES_FIELD_NUMBER: _ClassVar[int]
    CAPACITY_BYTES_FIELD_NUMBER: _ClassVar[int]
    NUM_OBJECTS_FIELD_NUMBER: _ClassVar[int]
    used_bytes: int
    capacity_bytes: int
    num_objects: int
    def __init__(self, used_bytes: _Optional[int] = ..., capacity_bytes: _Optional[int] = ..., num_objects: _Optional[int] = ...) -> None: ...
