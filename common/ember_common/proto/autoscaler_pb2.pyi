from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ResourceDemand(_message.Message):
    __slots__ = ("resources", "count")
    class ResourcesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    RESOURCES_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    resources: _containers.ScalarMap[str, float]
    count: int
    def __init__(self, resources: _Optional[_Mapping[str, float]] = ..., count: _Optional[int] = ...) -> None: ...

class ReportResourceLoadRequest(_message.Message):
    __slots__ = ("node_id", "queued", "infeasible", "idle_duration_s", "leased", "idle")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    QUEUED_FIELD_NUMBER: _ClassVar[int]
    INFEASIBLE_FIELD_NUMBER: _ClassVar[int]
    IDLE_DURATION_S_FIELD_NUMBER: _ClassVar[int]
    LEASED_FIELD_NUMBER: _ClassVar[int]
    IDLE_FIELD_NUMBER: _ClassVar[int]
    node_id: str
    queued: _containers.RepeatedCompositeFieldContainer[ResourceDemand]
    infeasible: _containers.RepeatedCompositeFieldContainer[ResourceDemand]
    idle_duration_s: float
    leased: int
    idle: bool
    def __init__(self, node_id: _Optional[str] = ..., queued: _Optional[_Iterable[_Union[ResourceDemand, _Mapping]]] = ..., infeasible: _Optional[_Iterable[_Union[ResourceDemand, _Mapping]]] = ..., idle_duration_s: _Optional[float] = ..., leased: _Optional[int] = ..., idle: _Optional[bool] = ...) -> None: ...

class ReportResourceLoadReply(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class NodeLoad(_message.Message):
    __slots__ = ("node_id", "raylet_address", "objmgr_address", "is_head", "total_resources", "available_resources", "queued", "infeasible", "idle_duration_s", "leased", "reported")
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
    RAYLET_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    OBJMGR_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    IS_HEAD_FIELD_NUMBER: _ClassVar[int]
    TOTAL_RESOURCES_FIELD_NUMBER: _ClassVar[int]
    AVAILABLE_RESOURCES_FIELD_NUMBER: _ClassVar[int]
    QUEUED_FIELD_NUMBER: _ClassVar[int]
    INFEASIBLE_FIELD_NUMBER: _ClassVar[int]
    IDLE_DURATION_S_FIELD_NUMBER: _ClassVar[int]
    LEASED_FIELD_NUMBER: _ClassVar[int]
    REPORTED_FIELD_NUMBER: _ClassVar[int]
    node_id: str
    raylet_address: str
    objmgr_address: str
    is_head: bool
    total_resources: _containers.ScalarMap[str, float]
    available_resources: _containers.ScalarMap[str, float]
    queued: _containers.RepeatedCompositeFieldContainer[ResourceDemand]
    infeasible: _containers.RepeatedCompositeFieldContainer[ResourceDemand]
    idle_duration_s: float
    leased: int
    reported: bool
    def __init__(self, node_id: _Optional[str] = ..., raylet_address: _Optional[str] = ..., objmgr_address: _Optional[str] = ..., is_head: _Optional[bool] = ..., total_resources: _Optional[_Mapping[str, float]] = ..., available_resources: _Optional[_Mapping[str, float]] = ..., queued: _Optional[_Iterable[_Union[ResourceDemand, _Mapping]]] = ..., infeasible: _Optional[_Iterable[_Union[ResourceDemand, _Mapping]]] = ..., idle_duration_s: _Optional[float] = ..., leased: _Optional[int] = ..., reported: _Optional[bool] = ...) -> None: ...

class PendingPlacementGroup(_message.Message):
    __slots__ = ("placement_group_id", "strategy", "bundles", "state_message")
    PLACEMENT_GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    STRATEGY_FIELD_NUMBER: _ClassVar[int]
    BUNDLES_FIELD_NUMBER: _ClassVar[int]
    STATE_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    placement_group_id: bytes
    strategy: str
    bundles: _containers.RepeatedCompositeFieldContainer[ResourceDemand]
    state_message: str
    def __init__(self, placement_group_id: _Optional[bytes] = ..., strategy: _Optional[str] = ..., bundles: _Optional[_Iterable[_Union[ResourceDemand, _Mapping]]] = ..., state_message: _Optional[str] = ...) -> None: ...

class GetClusterResourceStateRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetClusterResourceStateReply(_message.Message):
    __slots__ = ("nodes", "pending_placement_groups", "requested")
    NODES_FIELD_NUMBER: _ClassVar[int]
    PENDING_PLACEMENT_GROUPS_FIELD_NUMBER: _ClassVar[int]
    REQUESTED_FIELD_NUMBER: _ClassVar[int]
    nodes: _containers.RepeatedCompositeFieldContainer[NodeLoad]
    pending_placement_groups: _containers.RepeatedCompositeFieldContainer[PendingPlacementGroup]
    requested: _containers.RepeatedCompositeFieldContainer[ResourceDemand]
    def __init__(self, nodes: _Optional[_Iterable[_Union[NodeLoad, _Mapping]]] = ..., pending_placement_groups: _Optional[_Iterable[_Union[PendingPlacementGroup, _Mapping]]] = ..., requested: _Optional[_Iterable[_Union[ResourceDemand, _Mapping]]] = ...) -> None: ...
