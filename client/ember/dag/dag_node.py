"""DAGNode: the base of every node of a lazy task graph (`ray.dag`'s DAGNode).

A node holds what `.bind()` was given: positional and keyword arguments, options, and other
values the node needs resolved before it runs (an actor method's actor, the method call bound
before it). Arguments may be other nodes, also inside lists, tuples and dicts. This module is
pure graph code: walking, copying, and finding children. Running a graph is `executor.py`'s
job; `execute()` only hands the graph to it.
"""
from __future__ import annotations

import uuid
from typing import Any, Callable, Iterator


class DAGNode:
    """A node of a task graph built with `.bind()`; `execute()` runs the graph it is the root of."""

    def __init__(self, args: tuple[Any, ...] | list[Any], kwargs: dict[str, Any],
                 options: dict[str, Any], other_args_to_resolve: dict[str, Any] | None) -> None:
        self._bound_args: list[Any] = list(args or [])
        self._bound_kwargs: dict[str, Any] = dict(kwargs or {})
        self._bound_options: dict[str, Any] = dict(options or {})
        self._bound_other_args_to_resolve: dict[str, Any] = dict(other_args_to_resolve or {})
        self._stable_uuid = uuid.uuid4().hex  # kept by copies (apply_recursive)
        self.cache_from_last_execute: dict[str, Any] = {}
        self._plan: Any = None  # the executor's topological order, built on first execute()

    # -- what was bound ----------------------------------------------------------------------
    def get_args(self) -> tuple[Any, ...]:
        """The bound positional arguments."""
        return tuple(self._bound_args)

    def get_kwargs(self) -> dict[str, Any]:
        """A copy of the bound keyword arguments."""
        return dict(self._bound_kwargs)

    def get_options(self) -> dict[str, Any]:
        """A copy of the options (`.options(...)`) of the function, class or method."""
        return dict(self._bound_options)

    def get_other_args_to_resolve(self) -> dict[str, Any]:
        """A copy of the node-specific values resolved before it runs."""
        return dict(self._bound_other_args_to_resolve)

    def get_stable_uuid(self) -> str:
        """An id made once per node and kept by its copies."""
        return self._stable_uuid

    # -- running -----------------------------------------------------------------------------
    def execute(self, *args: Any, _ray_cache_refs: bool = False, **kwargs: Any) -> Any:
        """Runs the graph rooted here: every node once, children first. `args`/`kwargs` are
        the InputNode's value. Returns what the root gives: an ObjectRef (function or method
        node), an ActorHandle (class node), a list (MultiOutputNode). With `_ray_cache_refs`
        every node's result is kept in `cache_from_last_execute` by node uuid."""
        from .executor import execute

        results = execute(self, args, kwargs)
        if _ray_cache_refs:
            self.cache_from_last_execute = results
        return results[self._stable_uuid]

    def experimental_compile(self, *args: Any, **kwargs: Any) -> Any:
        """Compiled graphs (Ray's accelerated DAGs) are not implemented by Ember."""
        raise NotImplementedError("experimental_compile (Ray Compiled Graphs) is not supported "
                                  "by Ember; run the graph with .execute()")

    def clear_cache(self) -> None:
        """Forgets the results kept by `execute(_ray_cache_refs=True)`."""
        self.cache_from_last_execute = {}

    # -- walking -----------------------------------------------------------------------------
    def _bound(self) -> list[Any]:
        return [self._bound_args, self._bound_kwargs, self._bound_other_args_to_resolve]

    def _get_toplevel_child_nodes(self) -> list[DAGNode]:
        """Nodes passed directly as arguments (not nested in containers), in order, once each."""
        out: list[DAGNode] = []
        for v in (*self._bound_args, *self._bound_kwargs.values(),
                  *self._bound_other_args_to_resolve.values()):
            if isinstance(v, DAGNode) and v not in out:
                out.append(v)
        return out

    def _get_all_child_nodes(self) -> list[DAGNode]:
        """Every node among the arguments, also inside lists, tuples and dicts, once each."""
        out: list[DAGNode] = []
        for n in find_nodes(self._bound()):
            if n not in out:
                out.append(n)
        return out

    def _apply_and_replace_all_child_nodes(self, fn: Callable[[DAGNode], Any]) -> DAGNode:
        """A copy of this node whose child nodes are replaced by fn(child) (one level)."""
        table: dict[int, Any] = {}
        for n in find_nodes(self._bound()):
            if id(n) not in table:
                table[id(n)] = fn(n)
        args, kwargs, other = replace_nodes(self._bound(), table)
        return self._copy(args, kwargs, self.get_options(), other)

    def apply_recursive(self, fn: Callable[[DAGNode], Any]) -> Any:
        """Applies fn to every node bottom-up, once per node: fn sees a copy of the node whose
        children are already replaced by fn's results for them. Returns fn's result for self."""
        cache: dict[str, Any] = {}

        def visit(node: DAGNode) -> Any:
            if node._stable_uuid not in cache:
                cache[node._stable_uuid] = fn(node._apply_and_replace_all_child_nodes(visit))
            return cache[node._stable_uuid]

        return visit(self)

    def traverse_and_apply(self, fn: Callable[[DAGNode], None]) -> None:
        """Calls fn once on every node reachable from this one (children first)."""
        seen: set[str] = set()

        def visit(node: DAGNode) -> None:
            if node._stable_uuid in seen:
                return
            seen.add(node._stable_uuid)
            for child in node._get_all_child_nodes():
                visit(child)
            fn(node)

        visit(self)

    def _copy(self, args: list[Any], kwargs: dict[str, Any], options: dict[str, Any],
              other: dict[str, Any]) -> DAGNode:
        node = self._copy_impl(args, kwargs, options, other)
        node._stable_uuid = self._stable_uuid
        return node

    def _copy_impl(self, args: list[Any], kwargs: dict[str, Any], options: dict[str, Any],
                   other: dict[str, Any]) -> DAGNode:
        raise NotImplementedError

    # -- misuse ------------------------------------------------------------------------------
    def __getattr__(self, attr: str) -> Any:
        if attr == "bind":
            raise AttributeError(f".bind() cannot be used again on {type(self).__name__}")
        if attr == "remote":
            raise AttributeError(f".remote() cannot be used on {type(self).__name__}; to run "
                                 "the graph of this node, use .execute()")
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {attr!r}")

    def __reduce__(self) -> tuple[Any, ...]:
        raise ValueError(f"{type(self).__name__} cannot be serialized: a graph node lives in the "
                         "process that built it (pass what execute() returns instead)")

    def __str__(self) -> str:
        return f"({type(self).__name__}, {self._stable_uuid})"

    __repr__ = __str__


def find_nodes(value: Any) -> Iterator[DAGNode]:
    """Every DAGNode in value, looking inside lists, tuples and dicts (not inside nodes)."""
    if isinstance(value, DAGNode):
        yield value
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from find_nodes(v)
    elif isinstance(value, dict):
        for v in value.values():
            yield from find_nodes(v)


def replace_nodes(value: Any, table: dict[int, Any]) -> Any:
    """value with every DAGNode n replaced by table[id(n)] (containers rebuilt, others kept)."""
    if isinstance(value, DAGNode):
        return table[id(value)]
    if isinstance(value, list):
        return [replace_nodes(v, table) for v in value]
    if isinstance(value, tuple):
        items = [replace_nodes(v, table) for v in value]
        return type(value)(*items) if hasattr(value, "_fields") else tuple(items)
    if isinstance(value, dict):
        return {k: replace_nodes(v, table) for k, v in value.items()}
    return value
