"""MultiOutputNode: the end of a graph with several results; execute() returns their list."""
from __future__ import annotations

from typing import Any

from .dag_node import DAGNode


class MultiOutputNode(DAGNode):
    """Several nodes as one root: `MultiOutputNode([a, b]).execute()` is `[ref_a, ref_b]`."""

    def __init__(self, args: list[Any] | tuple[Any, ...],
                 other_args_to_resolve: dict[str, Any] | None = None) -> None:
        if not isinstance(args, (list, tuple)):
            raise ValueError(f"MultiOutputNode takes a list or tuple of nodes, got "
                             f"{type(args).__name__}")
        super().__init__(list(args), {}, {}, other_args_to_resolve)

    def _copy_impl(self, args: list[Any], kwargs: dict[str, Any], options: dict[str, Any],
                   other: dict[str, Any]) -> DAGNode:
        return MultiOutputNode(args, other)
