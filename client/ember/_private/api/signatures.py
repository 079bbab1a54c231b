"""Signature checks at submission, as Ray 2.60 does them: `f.remote(...)`, `A.remote(...)` and
`a.m.remote(...)` whose arguments do not bind to the function's (constructor's, method's)
signature raise `TypeError` in the caller before anything is submitted.

A Signature keeps only what binding needs (names, kinds, whether a default exists), so it is
small, cheap to pickle with an actor handle, and never drags default values or annotations
along. It is built once per function or class (cached) and checks a call in a few comparisons
when there are only positional arguments; anything else goes through `inspect.Signature.bind`,
whose message Ray reports too ("missing a required argument: 'x'", "too many positional
arguments", ...).
"""
from __future__ import annotations

import inspect
import weakref
from typing import Any

_P = inspect.Parameter
_KIND = inspect._ParameterKind
_POSITIONAL = (_P.POSITIONAL_ONLY, _P.POSITIONAL_OR_KEYWORD)
_NO_DEFAULT = _P.empty


class _Default:
    """Stands for a parameter's default: binding only needs to know that one exists."""

    def __repr__(self) -> str:
        return "..."


_HAS_DEFAULT = _Default()


class Signature:
    """The parameters of a callable, reduced to what binding needs."""

    __slots__ = ("params", "_min_pos", "_max_pos", "_fast", "_pos_names", "_keywords",
                 "_required", "_var_kw", "_sig")

    def __init__(self, params: tuple[tuple[str, int, bool], ...]) -> None:
        self.params = params  # (name, inspect.Parameter kind as int, has a default)
        positional = [p for p in params if p[1] in _POSITIONAL]
        self._min_pos = sum(1 for p in positional if not p[2])
        var_pos = any(p[1] == _P.VAR_POSITIONAL for p in params)
        self._max_pos = float("inf") if var_pos else len(positional)
        # Positional-only calls need no bind() unless a keyword-only parameter is required.
        self._fast = not any(p[1] == _P.KEYWORD_ONLY and not p[2] for p in params)
        # For calls with keywords: the names they may use, and the names that must be given.
        self._pos_names = tuple(p[0] for p in positional)
        self._keywords = frozenset(p[0] for p in params
                                   if p[1] in (_P.POSITIONAL_OR_KEYWORD, _P.KEYWORD_ONLY))
        self._required = frozenset(p[0] for p in params if not p[2] and p[1] in (
            *_POSITIONAL, _P.KEYWORD_ONLY))
        self._var_kw = any(p[1] == _P.VAR_KEYWORD for p in params)
        self._sig: inspect.Signature | None = None

    def __reduce__(self) -> tuple[Any, ...]:
        return (Signature, (self.params,))

    def __repr__(self) -> str:
        return f"Signature{self._signature()}"

    def check(self, args: tuple[Any, ...], kwargs: dict[str, Any], what: str) -> None:
        """Raises TypeError naming what when args/kwargs do not bind to this signature."""
        if not kwargs:
            if self._fast and self._min_pos <= len(args) <= self._max_pos:
                return
        elif self._binds_with_keywords(args, kwargs):
            return
        try:
            self._signature().bind(*args, **kwargs)
        except TypeError as e:
            raise TypeError(f"{e} (in a call of {what}{self._signature()})") from None

    def _binds_with_keywords(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
        """What bind() would decide, without building its BoundArguments (False: let bind()
        find the problem and say it)."""
        if len(args) > self._max_pos:
            return False
        given = set(self._pos_names[:len(args)])
        keywords = self._keywords
        for k in kwargs:
            if k in keywords:
                if k in given:
                    return False  # given twice
                given.add(k)
            elif not self._var_kw:
                return False  # unknown name (or a positional-only one without **kwargs)
        return self._required <= given

    def _signature(self) -> inspect.Signature:
        if self._sig is None:
            self._sig = inspect.Signature([
                _P(name, _KIND(kind), default=_HAS_DEFAULT if has_default else _NO_DEFAULT)
                for name, kind, has_default in self.params])
        return self._sig


def _reduce(sig: inspect.Signature, drop_first: bool) -> Signature | None:
    params = list(sig.parameters.values())
    if drop_first:
        if not params or params[0].kind not in _POSITIONAL:
            return None  # no `self` to drop: leave the check to the call itself
        params = params[1:]
    return Signature(tuple((p.name, int(p.kind), p.default is not _NO_DEFAULT) for p in params))


_functions: weakref.WeakKeyDictionary[Any, Signature | None] = weakref.WeakKeyDictionary()
_classes: weakref.WeakKeyDictionary[type, dict[str, Signature]] = weakref.WeakKeyDictionary()
# Actor classes this process exported, by function id: get_actor() handles of actors created
# here check their calls too (one entry per class, not per actor).
_by_function_id: dict[str, dict[str, Signature]] = {}


def of_function(fn: Any) -> Signature | None:
    """fn's signature (cached), or None when it has none Python can read."""
    try:
        return _functions[fn]
    except (KeyError, TypeError):
        pass
    try:
        sig: Signature | None = _reduce(inspect.signature(fn), False)
    except (TypeError, ValueError):
        sig = None
    try:
        _functions[fn] = sig
    except TypeError:  # not weak-referenceable: not cached
        pass
    return sig


def of_class(cls: type) -> dict[str, Signature]:
    """The signatures of an actor class's constructor ("__init__") and methods (cached), as
    callers see them: without `self` (or `cls` for class methods, which Python binds)."""
    found = _classes.get(cls)
    if found is not None:
        return found
    out: dict[str, Signature] = {}
    for name, member in inspect.getmembers(cls):
        if name.startswith("__") and name not in ("__init__", "__call__"):
            continue
        static = isinstance(inspect.getattr_static(cls, name, None), staticmethod)
        if inspect.ismethod(member):  # a class method: cls is bound already
            drop = False
        elif inspect.isfunction(member):
            drop = not static
        elif name == "__init__":
            if member is object.__init__ and cls.__new__ is object.__new__:  # type: ignore[comparison-overlap]  # typeshed overloads __new__
                out[name] = Signature(())  # neither defined: the actor takes no arguments
            continue
        else:
            continue
        try:
            sig = _reduce(inspect.signature(member), drop)
        except (TypeError, ValueError):
            sig = None
        if sig is not None:
            out[name] = sig
    _classes[cls] = out
    return out


def remember(function_id: str, sigs: dict[str, Signature]) -> None:
    """Records the signatures of the actor class exported as function_id."""
    _by_function_id[function_id] = sigs


def known(function_id: str) -> dict[str, Signature] | None:
    """The signatures of an actor class this process exported (None: not known here)."""
    return _by_function_id.get(function_id)
