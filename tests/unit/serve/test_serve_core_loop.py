"""Which replicas run on the worker's core loop (serve/_private/core_loop.py) and which actor
methods the executor moves there (executor.core_loop_methods): pure checks, no process."""
from __future__ import annotations

from ember._private.execution.executor import core_loop_methods
from ember.serve._private.core_loop import never_blocks, replica_methods, runs_on_core_loop
from ember.serve._private.replica import ServeReplica


@never_blocks()
class _Ours:
    async def __call__(self, request: object) -> str:
        return "ok"


class _UsersSubclass(_Ours):
    async def __call__(self, request: object) -> str:  # may block: the user's code
        return "mine"


@never_blocks(when=lambda inst: inst.safe)
class _Sometimes:
    def __init__(self, safe: bool) -> None:
        self.safe = safe


@never_blocks(when=lambda inst: 1 / 0)
class _Broken:
    pass


def _fn(request: object) -> str:
    return "fn"


def test_only_a_registered_class_itself_runs_on_the_core_loop() -> None:
    assert runs_on_core_loop(_Ours, _Ours())
    assert not runs_on_core_loop(_UsersSubclass, _UsersSubclass())
    assert not runs_on_core_loop(_fn, _fn)
    assert not runs_on_core_loop(dict, {})


def test_the_instance_check_decides_and_a_failing_one_says_no() -> None:
    assert runs_on_core_loop(_Sometimes, _Sometimes(True))
    assert not runs_on_core_loop(_Sometimes, _Sometimes(False))
    assert not runs_on_core_loop(_Broken, _Broken())


def test_the_replica_moves_whole() -> None:
    names = replica_methods(ServeReplica)
    assert {"handle_http", "handle_request", "handle_request_streaming", "stream_poll", "stream_next",
            "stream_channel", "cancel", "check_health", "ready", "drain", "reconfigure",
            "stream_stats"} <= names
    assert not any(n.startswith("_") for n in names)


class _Declares:
    __ember_core_loop_methods__ = frozenset({"f"})


class _Inherits(_Declares):
    pass


class _Wrong:
    __ember_core_loop_methods__ = {"f"}  # a set, not a frozenset


class _WrongItems:
    __ember_core_loop_methods__ = frozenset({1})


def test_the_executor_reads_the_marker_only_from_the_class_itself() -> None:
    assert core_loop_methods(_Declares()) == frozenset({"f"})
    assert core_loop_methods(_Inherits()) == frozenset()
    assert core_loop_methods(_Wrong()) == frozenset()
    assert core_loop_methods(_WrongItems()) == frozenset()
    assert core_loop_methods(object()) == frozenset()


def test_serve_replica_instance_sets_it_per_deployment() -> None:
    inst = ServeReplica.__new__(ServeReplica)
    assert core_loop_methods(inst) == frozenset()  # the class default: nothing moves
    inst.__ember_core_loop_methods__ = replica_methods(ServeReplica)
    assert "handle_http" in core_loop_methods(inst)
