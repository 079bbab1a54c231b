"""inspect_serializability: why an object cannot be pickled (as `ray.util.inspect_serializability`).

It tries cloudpickle on the object; when that fails it looks inside, to `depth` levels: a
function's closure variables and the globals it uses, an object's attributes (its `__dict__`),
a class's methods. The innermost members that still fail are the culprits. Returns
`(serializable, failures)`: failures is a set of FailureTuple(obj, name, parent), empty when the
object pickles. A short report goes to `print_file` (stdout by default).
"""
from __future__ import annotations

import inspect
import sys
from typing import IO, Any

import cloudpickle


class FailureTuple:
    """One member that cannot be pickled: the object, its name, and the object holding it."""

    def __init__(self, obj: Any, name: str, parent: Any) -> None:
        self.obj = obj
        self.name = name
        self.parent = parent

    def __repr__(self) -> str:
        return f"FailTuple({self.name} [obj={self.obj!r}, parent={self.parent!r}])"


def _pickles(obj: Any) -> bool:
    try:
        cloudpickle.dumps(obj)
        return True
    except Exception:
        return False


def _members(obj: Any) -> list[tuple[str, Any]]:
    """The named values inside obj that pickling it would pickle too."""
    if inspect.isfunction(obj) or inspect.ismethod(obj):
        fn = obj.__func__ if inspect.ismethod(obj) else obj
        closure = inspect.getclosurevars(fn)
        out = list(closure.nonlocals.items()) + list(closure.globals.items())
        if inspect.ismethod(obj):
            out.append(("__self__", obj.__self__))
        return out
    if inspect.isclass(obj):
        return [(k, v) for k, v in vars(obj).items()
                if not (k.startswith("__") and k.endswith("__"))]
    try:
        return list(vars(obj).items())
    except TypeError:  # no __dict__ (builtins, slots)
        return []


def _inspect(obj: Any, name: str, parent: Any, depth: int, failures: set[FailureTuple],
             out: IO[str], indent: int) -> bool:
    pad = "    " * indent
    if _pickles(obj):
        return True
    print(f"{pad}!!! FAIL serializing {name!r} {obj!r}", file=out)
    found = False
    if depth > 0:
        for member_name, member in _members(obj):
            if not _pickles(member):
                found = True
                _inspect(member, member_name, obj, depth - 1, failures, out, indent + 1)
    if not found:  # nothing inside fails on its own: this object is the culprit
        failures.add(FailureTuple(obj, name, parent))
    return False


def inspect_serializability(base_obj: Any, name: str | None = None, depth: int = 3,
                            print_file: IO[str] | None = None) -> tuple[bool, set[FailureTuple]]:
    """(True, set()) if base_obj pickles, else (False, the innermost failing members)."""
    out = print_file if print_file is not None else sys.stdout
    label = name or getattr(base_obj, "__name__", None) or repr(base_obj)
    failures: set[FailureTuple] = set()
    print(f"Checking serializability of {label!r}", file=out)
    ok = _inspect(base_obj, label, None, depth, failures, out, 0)
    if ok:
        print(f"{label!r} is serializable", file=out)
    else:
        print(f"Variables that failed serialization: {failures}", file=out)
    return ok, failures
