"""Objects: references to values, how values become bytes, and where those bytes live.

- object_ref: ObjectRef (a future with owner-based reference counting) and OwnerAddress;
- serialization: cloudpickle, protocol 5, out-of-band buffers;
- plasma: the client of the node's shared-memory store;
- object_api: put/get/wait (mixed into CoreWorker); object_transfer: pulls between nodes.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from .. import lazy_face

if TYPE_CHECKING:
    from .object_api import ObjectAPI as ObjectAPI
    from .object_ref import ObjectRef as ObjectRef
    from .object_ref import OwnerAddress as OwnerAddress
    from .object_transfer import ObjectTransfer as ObjectTransfer
    from .plasma import PlasmaClient as PlasmaClient
    from .serialization import SerializedValue as SerializedValue
    from .serialization import deserialize as deserialize
    from .serialization import deserialize_proto as deserialize_proto
    from .serialization import serialize as serialize
    from .serialization import serialize_error as serialize_error

# The names other packages use, by the module that defines them. They load on first use: the
# package itself imports nothing, so importing one of its modules costs only that module.
_NAMES = {
    "ObjectAPI": "object_api",
    "ObjectRef": "object_ref",
    "ObjectTransfer": "object_transfer",
    "OwnerAddress": "object_ref",
    "PlasmaClient": "plasma",
    "SerializedValue": "serialization",
    "deserialize": "serialization",
    "deserialize_proto": "serialization",
    "serialize": "serialization",
    "serialize_error": "serialization",
}
__all__ = sorted(_NAMES)

__getattr__ = lazy_face(__name__, _NAMES)
