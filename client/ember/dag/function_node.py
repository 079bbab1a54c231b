"""FunctionNode: `f.bind(...)` on a remote function; it runs as one task per execute()."""
from __future__ import annotations

from typing import Any

from .dag_node import DAGNode


class FunctionNode(DAGNode):
    """A task of the graph: the remote function (with its options) and its bound arguments."""

    def __init__(self, func_body: Any, func_args: tuple[Any, ...] | list[Any],
                 func_kwargs: dict[str, Any], func_options: dict[str, Any],
                 other_args_to_resolve: dict[str, Any] | None = None) -> None:
        self._body = func_body  # the RemoteFunction, its options applied
        super().__init__(func_args, func_kwargs, func_options, other_args_to_resolve)

    def _copy_impl(self, args: list[Any], kwargs: dict[str, Any], options: dict[str, Any],
                   other: dict[str, Any]) -> DAGNode:
        return FunctionNode(self._body, args, kwargs, options, other)

    def __str__(self) -> str:
        return f"(FunctionNode, {getattr(self._body, '__name__', self._body)})"
