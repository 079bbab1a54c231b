"""signatures.py: the reduced signature accepts and rejects exactly what inspect.Signature.bind
does (its fast path included), pickles without defaults or annotations, and reads actor classes
as callers see them."""
from __future__ import annotations

import inspect
import itertools
import pickle

import pytest

from ember._private.api import signatures


class Unpicklable:
    def __reduce__(self):  # noqa: ANN204
        raise TypeError("not picklable")


def f0():
    pass


def f1(a, b=1, *, c):
    pass


def f2(a, /, b, *args, d=Unpicklable(), **kw) -> Unpicklable:  # noqa: B008
    pass


def f3(a, b=2, c=3):
    pass


def f4(*args):
    pass


def f5(a, /, b=2, **kw):
    pass


def f6(*, a, b=1):
    pass


CALLS = [((), {}), ((1,), {}), ((1, 2), {}), ((1, 2, 3), {}), ((1, 2, 3, 4), {}),
         ((), {"a": 1}), ((1,), {"c": 1}), ((1,), {"a": 1}), ((1, 2), {"d": 1}),
         ((1,), {"b": 1, "c": 2}), ((), {"x": 1}), ((), {"a": 1, "b": 2}), ((1, 2), {"a": 3}),
         ((), {"a": 1, "b": 2, "c": 3}), ((1,), {"b": 2, "x": 3}), ((1, 2, 3), {"c": 4}),
         ((1,), {"b": 2, "d": 3}), ((1, 2), {"b": 3})]


@pytest.mark.parametrize("fn", [f0, f1, f2, f3, f4, f5, f6])
def test_accepts_exactly_what_bind_accepts(fn):
    sig = signatures.of_function(fn)
    full = inspect.signature(fn)
    for (args, kwargs), s in itertools.product(CALLS, [sig, pickle.loads(pickle.dumps(sig))]):
        try:
            full.bind(*args, **kwargs)
            expected = None
        except TypeError as e:
            expected = str(e)
        if expected is None:
            s.check(args, kwargs, fn.__name__)
        else:
            with pytest.raises(TypeError) as info:
                s.check(args, kwargs, fn.__name__)
            assert str(info.value).startswith(expected)
            assert f"{fn.__name__}(" in str(info.value)


def test_pickles_small_without_defaults_or_annotations():
    sig = signatures.of_function(f2)
    blob = pickle.dumps(sig)
    assert b"Unpicklable" not in blob and len(blob) < 200


def test_signatures_are_cached_per_function():
    assert signatures.of_function(f1) is signatures.of_function(f1)
    assert signatures.of_function(len) is None or signatures.of_function(len).params


class Base:
    def inherited(self, q):
        pass


class Actor(Base):
    def __init__(self, x, y=0):
        pass

    def m(self, a, *, k):
        pass

    @staticmethod
    def s(z):
        pass

    @classmethod
    def c(cls, w):
        pass

    def __call__(self, v):
        pass

    def __repr__(self):
        return "Actor"


class Bare:
    pass


class FromDict(dict):
    pass


def names(sig: signatures.Signature) -> list[str]:
    return [p[0] for p in sig.params]


def test_actor_classes_are_read_as_callers_see_them():
    sigs = signatures.of_class(Actor)
    assert {k: names(v) for k, v in sigs.items()} == {
        "__init__": ["x", "y"], "__call__": ["v"], "m": ["a", "k"], "s": ["z"], "c": ["w"],
        "inherited": ["q"]}
    assert signatures.of_class(Actor) is sigs
    assert list(signatures.of_class(Bare)) == ["__init__"]
    assert names(signatures.of_class(Bare)["__init__"]) == []
    assert "__init__" not in signatures.of_class(FromDict)  # a C constructor: not checked here
    with pytest.raises(TypeError, match="missing a required argument: 'k'"):
        sigs["m"].check((1,), {}, "Actor.m")
    with pytest.raises(TypeError, match="too many positional arguments"):
        signatures.of_class(Bare)["__init__"].check((1,), {}, "Bare.__init__")
