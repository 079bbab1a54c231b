from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ReadRangeRequest(_message.Message):
    __slots__ = ("object_id", "offset", "length")
    OBJECT_ID_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    LENGTH_FIELD_NUMBER: _ClassVar[int]
    object_id: bytes
    offset: int
    length: int
    def __init__(self, object_id: _Optional[bytes] = ..., offset: _Optional[int] = ..., length: _Optional[int] = ...) -> None: ...

class DataChunk(_message.Message):
    __slots__ = ("data", "total_size")
    DATA_FIELD_NUMBER: _ClassVar[int]
    TOTAL_SIZE_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    total_size: int
    def __init__(self, data: _Optional[bytes] = ..., total_size: _Optional[int] = ...) -> None: ...

class CreateRequest(_message.Message):
    __slots__ = ("object_id", "size", "owner_worker_id", "client_id")
    OBJECT_ID_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    OWNER_WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    object_id: bytes
    size: int
    owner_worker_id: str
    client_id: str
    def __init__(self, object_id: _Optional[bytes] = ..., size: _Optional[int] = ..., owner_worker_id: _Optional[str] = ..., client_id: _Optional[str] = ...) -> None: ...

class CreateReply(_message.Message):
    __slots__ = ("offset", "fallback_path")
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    FALLBACK_PATH_FIELD_NUMBER: _ClassVar[int]
    offset: int
    fallback_path: str
    def __init__(self, offset: _Optional[int] = ..., fallback_path: _Optional[str] = ...) -> None: ...

class SealRequest(_message.Message):
    __slots__ = ("object_id",)
    OBJECT_ID_FIELD_NUMBER: _ClassVar[int]
    object_id: bytes
    def __init__(self, object_id: _Optional[bytes] = ...) -> None: ...

class SealReply(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetRequest(_message.Message):
    __slots__ = ("object_ids", "client_id")
    OBJECT_IDS_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    object_ids: _containers.RepeatedScalarFieldContainer[bytes]
    client_id: str
    def __init__(self, object_ids: _Optional[_Iterable[bytes]] = ..., client_id: _Optional[str] = ...) -> None: ...

class ObjectLocation(_message.Message):
    __slots__ = ("object_id", "offset", "size", "fallback_path")
    OBJECT_ID_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    FALLBACK_PATH_FIELD_NUMBER: _ClassVar[int]
    object_id: bytes
    offset: int
    size: int
    fallback_path: str
    def __init__(self, object_id: _Optional[bytes] = ..., offset: _Optional[int] = ..., size: _Optional[int] = ..., fallback_path: _Optional[str] = ...) -> None: ...

class GetReply(_message.Message):
    __slots__ = ("objects",)
    OBJECTS_FIELD_NUMBER: _ClassVar[int]
    objects: _containers.RepeatedCompositeFieldContainer[ObjectLocation]
    def __init__(self, objects: _Optional[_Iterable[_Union[ObjectLocation, _Mapping]]] = ...) -> None: ...

class ReleaseRequest(_message.Message):
    __slots__ = ("object_ids", "client_id")
    OBJECT_IDS_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    object_ids: _containers.RepeatedScalarFieldContainer[bytes]
    client_id: str
    def __init__(self, object_ids: _Optional[_Iterable[bytes]] = ..., client_id: _Optional[str] = ...) -> None: ...

class ReleaseReply(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class PullRequest(_message.Message):
    __slots__ = ("object_id", "source_address", "owner_worker_id")
    OBJECT_ID_FIELD_NUMBER: _ClassVar[int]
    SOURCE_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    OWNER_WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    object_id: bytes
    source_address: str
    owner_worker_id: str
    def __init__(self, object_id: _Optional[bytes] = ..., source_address: _Optional[str] = ..., owner_worker_id: _Optional[str] = ...) -> None: ...

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
    __slots__ = ("total_size", "offset", "data", "object_id", "owner_worker_id")
    TOTAL_SIZE_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    OBJECT_ID_FIELD_NUMBER: _ClassVar[int]
    OWNER_WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    total_size: int
    offset: int
    data: bytes
    object_id: bytes
    owner_worker_id: str
    def __init__(self, total_size: _Optional[int] = ..., offset: _Optional[int] = ..., data: _Optional[bytes] = ..., object_id: _Optional[bytes] = ..., owner_worker_id: _Optional[str] = ...) -> None: ...

class WriteObjectReply(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

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
    __slots__ = ("used_bytes", "capacity_bytes", "num_objects", "spilled_bytes", "num_spilled", "arena_path", "num_pinned", "fallback_bytes", "num_fallback")
    USED_BYTES_FIELD_NUMBER: _ClassVar[int]
    CAPACITY_BYTES_FIELD_NUMBER: _ClassVar[int]
    NUM_OBJECTS_FIELD_NUMBER: _ClassVar[int]
    SPILLED_BYTES_FIELD_NUMBER: _ClassVar[int]
    NUM_SPILLED_FIELD_NUMBER: _ClassVar[int]
    ARENA_PATH_FIELD_NUMBER: _ClassVar[int]
    NUM_PINNED_FIELD_NUMBER: _ClassVar[int]
    FALLBACK_BYTES_FIELD_NUMBER: _ClassVar[int]
    NUM_FALLBACK_FIELD_NUMBER: _ClassVar[int]
    used_bytes: int
    capacity_bytes: int
    num_objects: int
    spilled_bytes: int
    num_spilled: int
    arena_path: str
    num_pinned: int
    fallback_bytes: int
    num_fallback: int
    def __init__(self, used_bytes: _Optional[int] = ..., capacity_bytes: _Optional[int] = ..., num_objects: _Optional[int] = ..., spilled_bytes: _Optional[int] = ..., num_spilled: _Optional[int] = ..., arena_path: _Optional[str] = ..., num_pinned: _Optional[int] = ..., fallback_bytes: _Optional[int] = ..., num_fallback: _Optional[int] = ...) -> None: ...

class ListObjectsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ObjectStat(_message.Message):
    __slots__ = ("object_id", "size", "owner_worker_id", "state", "pins", "pinned_by", "creator")
    OBJECT_ID_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    OWNER_WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    PINS_FIELD_NUMBER: _ClassVar[int]
    PINNED_BY_FIELD_NUMBER: _ClassVar[int]
    CREATOR_FIELD_NUMBER: _ClassVar[int]
    object_id: bytes
    size: int
    owner_worker_id: str
    state: str
    pins: int
    pinned_by: _containers.RepeatedScalarFieldContainer[str]
    creator: str
    def __init__(self, object_id: _Optional[bytes] = ..., size: _Optional[int] = ..., owner_worker_id: _Optional[str] = ..., state: _Optional[str] = ..., pins: _Optional[int] = ..., pinned_by: _Optional[_Iterable[str]] = ..., creator: _Optional[str] = ...) -> None: ...

class ListObjectsReply(_message.Message):
    __slots__ = ("node_id", "objects")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    OBJECTS_FIELD_NUMBER: _ClassVar[int]
    node_id: str
    objects: _containers.RepeatedCompositeFieldContainer[ObjectStat]
    def __init__(self, node_id: _Optional[str] = ..., objects: _Optional[_Iterable[_Union[ObjectStat, _Mapping]]] = ...) -> None: ...
