"""ember.dag: lazy task graphs, as `ray.dag`.

    with InputNode() as inp:
        a = Model.bind(2)                        # an actor, made when the graph runs
        dag = MultiOutputNode([a.forward.bind(inp.x), add.bind(inp.x, 1)])
    ray.get(dag.execute(x=3))                    # [6, 4]

`.bind()` on a remote function, an actor class or an actor method (of a ClassNode or of a live
ActorHandle) makes a node instead of running anything; `node.execute(...)` runs the graph once
and returns what `.remote()` would: ObjectRefs, an ActorHandle, or for a MultiOutputNode a list.
Each execute() creates the graph's ClassNode actors anew (as Ray's does); bind methods on a live
handle to reuse an actor. Compiled graphs (`experimental_compile`) are not implemented.

Modules: dag_node (the base and graph walking), input_node, function_node, class_node,
output_node (the node kinds: pure data), executor (runs a graph through the public API).
"""
from __future__ import annotations

from .class_node import (
    BIND_INDEX_KEY,
    IS_CLASS_METHOD_OUTPUT_KEY,
    PARENT_CLASS_NODE_KEY,
    PREV_CLASS_METHOD_CALL_KEY,
    ClassMethodNode,
    ClassNode,
)
from .dag_node import DAGNode
from .function_node import FunctionNode
from .input_node import DAGInputData, InputAttributeNode, InputNode
from .output_node import MultiOutputNode

__all__ = ["BIND_INDEX_KEY", "ClassMethodNode", "ClassNode", "DAGInputData", "DAGNode",
           "FunctionNode", "IS_CLASS_METHOD_OUTPUT_KEY", "InputAttributeNode", "InputNode",
           "MultiOutputNode", "PARENT_CLASS_NODE_KEY", "PREV_CLASS_METHOD_CALL_KEY"]
