from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ListLogsRequest(_message.Message):
    __slots__ = ("glob",)
    GLOB_FIELD_NUMBER: _ClassVar[int]
    glob: str
    def __init__(self, glob: _Optional[str] = ...) -> None: ...

class LogFileInfo(_message.Message):
    __slots__ = ("name", "size", "mtime")
    NAME_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    MTIME_FIELD_NUMBER: _ClassVar[int]
    name: str
    size: int
    mtime: float
    def __init__(self, name: _Optional[str] = ..., size: _Optional[int] = ..., mtime: _Optional[float] = ...) -> None: ...

class ListLogsReply(_message.Message):
    __slots__ = ("node_id", "files")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    FILES_FIELD_NUMBER: _ClassVar[int]
    node_id: str
    files: _containers.RepeatedCompositeFieldContainer[LogFileInfo]
    def __init__(self, node_id: _Optional[str] = ..., files: _Optional[_Iterable[_Union[LogFileInfo, _Mapping]]] = ...) -> None: ...

class StreamLogRequest(_message.Message):
    __slots__ = ("filename", "pid", "suffix", "lines", "follow", "interval_s")
    FILENAME_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    SUFFIX_FIELD_NUMBER: _ClassVar[int]
    LINES_FIELD_NUMBER: _ClassVar[int]
    FOLLOW_FIELD_NUMBER: _ClassVar[int]
    INTERVAL_S_FIELD_NUMBER: _ClassVar[int]
    filename: str
    pid: int
    suffix: str
    lines: int
    follow: bool
    interval_s: float
    def __init__(self, filename: _Optional[str] = ..., pid: _Optional[int] = ..., suffix: _Optional[str] = ..., lines: _Optional[int] = ..., follow: _Optional[bool] = ..., interval_s: _Optional[float] = ...) -> None: ...

class LogChunk(_message.Message):
    __slots__ = ("data", "filename")
    DATA_FIELD_NUMBER: _ClassVar[int]
    FILENAME_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    filename: str
    def __init__(self, data: _Optional[bytes] = ..., filename: _Optional[str] = ...) -> None: ...
