"""The call site: what the public API's decorators and handles check and build.

- remote_function: RemoteFunction, what @ember.remote makes of a function;
- options / actor_options: @remote and .options(...) arguments, actor names and methods;
- signatures: argument binding checked before submission;
- scheduling: the scheduling strategy classes and how options become a placement;
- runtime_context: ember.get_runtime_context().
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from .. import lazy_face

if TYPE_CHECKING:
    from .remote_function import RemoteFunction as RemoteFunction
    from .runtime_context import RuntimeContext as RuntimeContext
    from .runtime_context import get_runtime_context as get_runtime_context
    from .scheduling import Placement as Placement

# The names other packages use, by the module that defines them. They load on first use: the
# package itself imports nothing, so importing one of its modules costs only that module.
_NAMES = {
    "Placement": "scheduling",
    "RemoteFunction": "remote_function",
    "RuntimeContext": "runtime_context",
    "get_runtime_context": "runtime_context",
}
__all__ = sorted(_NAMES)

__getattr__ = lazy_face(__name__, _NAMES)
