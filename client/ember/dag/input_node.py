"""InputNode: the value given to `dag.execute(...)`; InputAttributeNode: a part of it.

    with InputNode() as inp:
        dag = add.bind(inp[0], inp.y)   # index 0 of the positional args, keyword y
    dag.execute(1, y=2)

With one positional argument and no keywords the InputNode's value is that argument itself, so
`inp[0]`, `inp["k"]` and `inp.k` index it, read its key, read its attribute. With several, or
with keywords, an int indexes the positional arguments and a str names a keyword (as Ray's
`DAGInputData`). A graph has one InputNode, made in a `with` block (Ray's rule).
"""
from __future__ import annotations

from typing import Any

from .dag_node import DAGNode

IN_CONTEXT_MANAGER = "__in_context_manager__"


class InputNode(DAGNode):
    """Marks where `dag.execute(...)`'s arguments enter the graph."""

    def __init__(self, *args: Any, input_type: Any = None,
                 _other_args_to_resolve: dict[str, Any] | None = None, **kwargs: Any) -> None:
        if args or kwargs:
            raise ValueError("InputNode takes no arguments; pass the input to dag.execute(...)")
        self.input_attribute_nodes: dict[Any, InputAttributeNode] = {}
        self.input_type = input_type
        super().__init__([], {}, {}, _other_args_to_resolve)

    def _copy_impl(self, args: list[Any], kwargs: dict[str, Any], options: dict[str, Any],
                   other: dict[str, Any]) -> DAGNode:
        return InputNode(_other_args_to_resolve=other)

    def _in_context_manager(self) -> bool:
        return bool(self._bound_other_args_to_resolve.get(IN_CONTEXT_MANAGER))

    def set_context(self, key: str, val: Any) -> None:
        """Sets a value the node keeps through copies."""
        self._bound_other_args_to_resolve[key] = val

    def __enter__(self) -> InputNode:
        self.set_context(IN_CONTEXT_MANAGER, True)
        return self

    def __exit__(self, *exc: Any) -> None:
        return None

    def __getattr__(self, key: str) -> Any:
        if key.startswith("__") or key in ("_bound_args", "_bound_kwargs", "_bound_options",
                                           "_bound_other_args_to_resolve", "_stable_uuid",
                                           "input_attribute_nodes", "_plan"):
            return DAGNode.__getattr__(self, key)
        return self._attribute(key, "__getattr__")

    def __getitem__(self, key: int | str) -> InputAttributeNode:
        if not isinstance(key, (int, str)) or isinstance(key, bool):
            raise TypeError(f"an InputNode is indexed by an int or a str, got {type(key).__name__}")
        return self._attribute(key, "__getitem__")

    def _attribute(self, key: int | str, accessor: str) -> InputAttributeNode:
        nodes: dict[Any, InputAttributeNode] = self.__dict__["input_attribute_nodes"]
        node = nodes.get((key, accessor))
        if node is None:
            node = nodes[(key, accessor)] = InputAttributeNode(self, key, accessor)
        return node

    def resolve(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """The node's value for one execute(): the single argument, or all of them."""
        if not self._in_context_manager():
            raise AssertionError("an InputNode must be created in a with block "
                                 "(with InputNode() as inp: ...) before the graph runs")
        if len(args) == 1 and not kwargs:
            return args[0]
        return DAGInputData(*args, **kwargs)


class InputAttributeNode(DAGNode):
    """`inp[key]` or `inp.key`: part of the InputNode's value."""

    def __init__(self, dag_input_node: Any, key: int | str, accessor_method: str,
                 input_type: str | None = None) -> None:
        self._dag_input_node = dag_input_node
        self._key = key
        self._accessor_method = accessor_method
        super().__init__([], {}, {}, {"dag_input_node": dag_input_node, "key": key,
                                      "accessor_method": accessor_method,
                                      "result_type_string": input_type})

    def _copy_impl(self, args: list[Any], kwargs: dict[str, Any], options: dict[str, Any],
                   other: dict[str, Any]) -> DAGNode:
        return InputAttributeNode(other["dag_input_node"], other["key"], other["accessor_method"],
                                  other["result_type_string"])

    def select(self, value: Any) -> Any:
        """This node's part of the InputNode's value."""
        if isinstance(value, DAGInputData):
            return value[self._key]
        if isinstance(self._key, str) and self._accessor_method == "__getattr__":
            return getattr(value, self._key)
        return value[self._key]


class DAGInputData:
    """Several arguments (or keywords) given to execute(): ints index the positional ones,
    strs name the keywords."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._args = list(args)
        self._kwargs = kwargs

    def __getitem__(self, key: int | str) -> Any:
        if isinstance(key, int):
            if key >= len(self._args):
                raise IndexError(f"dag.execute() got {len(self._args)} positional arguments; "
                                 f"the graph reads index {key}")
            return self._args[key]
        if key not in self._kwargs:
            raise KeyError(f"dag.execute() got no keyword argument {key!r} "
                           f"(got {sorted(self._kwargs)})")
        return self._kwargs[key]

    def __getattr__(self, key: str) -> Any:
        if key.startswith("_"):
            raise AttributeError(key)
        return self[key]
