"""Runs a graph: each node once per execute(), children first, through Ember's public API.

The order (a topological sort of the nodes reachable from the root) is computed on the first
execute() and kept on the root: nodes are never changed after they are made, and a method call
bound later on the same actor refers back to earlier calls, never the reverse, so what a root
reaches does not change. Each node's value:

    InputNode              the execute() arguments (one argument: itself)
    InputAttributeNode     its part of them
    FunctionNode           body.remote(*args, **kwargs)            -> ObjectRef (or refs)
    ClassNode              ActorClass.remote(*args, **kwargs)      -> ActorHandle
    ClassMethodNode        handle.method[.options(...)].remote(...) -> ObjectRef (or refs)
    MultiOutputNode        the list of its arguments' values

Nodes among a node's arguments are replaced by their values (top-level ObjectRefs are then
resolved by the task as usual; nested ones stay refs, as Ray passes them).
"""
from __future__ import annotations

from typing import Any

from .class_node import ClassMethodNode, ClassNode
from .dag_node import DAGNode, find_nodes, replace_nodes
from .function_node import FunctionNode
from .input_node import InputAttributeNode, InputNode
from .output_node import MultiOutputNode


class _Step:
    """One node of the plan: how to rebuild its arguments from the values of its children."""

    __slots__ = ("node", "uuid", "children", "kind", "call")

    def __init__(self, node: DAGNode) -> None:
        self.node = node
        self.uuid = node._stable_uuid
        self.children = [c._stable_uuid for c in node._get_all_child_nodes()]
        self.kind = type(node)
        self.call: Any = None  # the bound remote callable, made once per plan


def plan(root: DAGNode) -> list[_Step]:
    """The nodes reachable from root, each after its children (iterative: deep chains are fine).
    A graph with two InputNodes is refused (Ray's rule)."""
    order: list[_Step] = []
    done: set[str] = set()
    inputs: set[str] = set()
    stack: list[tuple[DAGNode, bool]] = [(root, False)]
    while stack:
        node, expanded = stack.pop()
        if node._stable_uuid in done:
            continue
        if expanded:
            done.add(node._stable_uuid)
            order.append(_Step(node))
            if isinstance(node, InputNode):
                inputs.add(node._stable_uuid)
            continue
        stack.append((node, True))
        for child in reversed(node._get_all_child_nodes()):
            if child._stable_uuid not in done:
                stack.append((child, False))
    if len(inputs) > 1:
        raise ValueError("a graph has one InputNode; this one reaches "
                         f"{len(inputs)} (use attributes or indexes of a single InputNode)")
    return order


def execute(root: DAGNode, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    """Runs the graph of root once; returns every node's value by node uuid."""
    steps = root._plan
    if steps is None:
        steps = root._plan = plan(root)
    values: dict[str, Any] = {}
    for step in steps:
        values[step.uuid] = _run(step, values, args, kwargs)
    return values


def _resolved(node: DAGNode, values: dict[str, Any]) -> tuple[list[Any], dict[str, Any]]:
    """The node's bound args and kwargs with child nodes replaced by their values."""
    table = {id(n): values[n._stable_uuid] for n in find_nodes([node._bound_args,
                                                                node._bound_kwargs])}
    if not table:
        return node._bound_args, node._bound_kwargs
    return replace_nodes(node._bound_args, table), replace_nodes(node._bound_kwargs, table)


def _run(step: _Step, values: dict[str, Any], args: tuple[Any, ...],
         kwargs: dict[str, Any]) -> Any:
    node = step.node
    kind = step.kind
    if kind is InputNode:
        return node.resolve(args, kwargs)
    if kind is InputAttributeNode:
        source = node._bound_other_args_to_resolve["dag_input_node"]
        return node.select(values[source._stable_uuid])
    a, kw = _resolved(node, values)
    if kind is FunctionNode:
        return node._body.remote(*a, **kw)
    if kind is ClassNode:
        return node._body.remote(*a, **kw)
    if kind is ClassMethodNode:
        parent = node._parent_class_node
        handle = values[parent._stable_uuid] if isinstance(parent, DAGNode) else parent
        method = getattr(handle, node._method_name)
        if node._bound_options:
            method = method.options(**node._bound_options)
        return method.remote(*a, **kw)
    if kind is MultiOutputNode:
        return list(a)
    raise TypeError(f"cannot run a node of type {kind.__name__}")
