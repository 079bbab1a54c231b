"""ClassNode (`Actor.bind(...)`: an actor made per execute()) and ClassMethodNode
(`node.method.bind(...)` or `handle.method.bind(...)`: one actor call per execute()).

Method calls bound on the same ClassNode run in the order they were bound: each call's node
holds the one bound before it, so the executor runs that one first (Ray's rule).
"""
from __future__ import annotations

from typing import Any

from .dag_node import DAGNode, find_nodes
from .input_node import InputAttributeNode, InputNode

PARENT_CLASS_NODE_KEY = "parent_class_node"
PREV_CLASS_METHOD_CALL_KEY = "prev_class_method_call"
BIND_INDEX_KEY = "bind_index"
IS_CLASS_METHOD_OUTPUT_KEY = "is_class_method_output"


class ClassNode(DAGNode):
    """An actor of the graph: created when the graph runs; its value is the ActorHandle."""

    def __init__(self, cls: Any, cls_args: tuple[Any, ...] | list[Any], cls_kwargs: dict[str, Any],
                 cls_options: dict[str, Any],
                 other_args_to_resolve: dict[str, Any] | None = None) -> None:
        self._body = cls  # the ActorClass, its options applied
        self._last_call: ClassMethodNode | None = None
        super().__init__(cls_args, cls_kwargs, cls_options, other_args_to_resolve)
        if any(isinstance(n, (InputNode, InputAttributeNode)) for n in find_nodes(self._bound())):
            raise ValueError("an InputNode cannot be an argument of an actor's constructor "
                             "(Actor.bind(...)): the input is not known when the actor is bound")

    def _copy_impl(self, args: list[Any], kwargs: dict[str, Any], options: dict[str, Any],
                   other: dict[str, Any]) -> DAGNode:
        return ClassNode(self._body, args, kwargs, options, other)

    def __getattr__(self, method_name: str) -> Any:
        if method_name.startswith("__") or method_name in ("_body", "_last_call", "_plan"):
            return DAGNode.__getattr__(self, method_name)
        names = {m.name for m in self.__dict__["_body"]._methods}
        if method_name not in names:
            if method_name == "bind":
                raise AttributeError(".bind() cannot be used again on ClassNode")
            raise AttributeError(f"type object '{self.__dict__['_body'].__name__}' has no "
                                 f"attribute '{method_name}' (no such actor method)")
        return _UnboundClassMethodNode(self, method_name, {})

    def __str__(self) -> str:
        return f"(ClassNode, {getattr(self._body, '__name__', self._body)})"


class _UnboundClassMethodNode:
    """`class_node.method`: `.bind(...)` makes the call's node, `.options(...)` sets options."""

    def __init__(self, actor: ClassNode, method_name: str, options: dict[str, Any]) -> None:
        self._actor = actor
        self._method_name = method_name
        self._options = options

    def bind(self, *args: Any, **kwargs: Any) -> ClassMethodNode:
        """The node of one call of the method, after the calls bound before it."""
        node = ClassMethodNode(self._method_name, args, kwargs, self._options, {
            PARENT_CLASS_NODE_KEY: self._actor,
            PREV_CLASS_METHOD_CALL_KEY: self._actor._last_call})
        self._actor._last_call = node
        return node

    def options(self, **options: Any) -> _UnboundClassMethodNode:
        """Options of the call (num_returns, name, concurrency_group)."""
        return _UnboundClassMethodNode(self._actor, self._method_name,
                                       {**self._options, **options})

    def remote(self, *args: Any, **kwargs: Any) -> Any:
        raise AttributeError(".remote() cannot be used on ClassMethodNodes; use .bind() to add "
                             "the call to the graph")


class ClassMethodNode(DAGNode):
    """A call of an actor method: on a ClassNode's actor or on a live ActorHandle."""

    def __init__(self, method_name: str, method_args: tuple[Any, ...] | list[Any],
                 method_kwargs: dict[str, Any], method_options: dict[str, Any],
                 other_args_to_resolve: dict[str, Any]) -> None:
        self._method_name = method_name
        self._parent_class_node = other_args_to_resolve.get(PARENT_CLASS_NODE_KEY)
        self._prev_class_method_call = other_args_to_resolve.get(PREV_CLASS_METHOD_CALL_KEY)
        self._bind_index = other_args_to_resolve.get(BIND_INDEX_KEY)
        super().__init__(method_args, method_kwargs, method_options, other_args_to_resolve)

    def _copy_impl(self, args: list[Any], kwargs: dict[str, Any], options: dict[str, Any],
                   other: dict[str, Any]) -> DAGNode:
        return ClassMethodNode(self._method_name, args, kwargs, options, other)

    def get_method_name(self) -> str:
        """The name of the actor method this node calls."""
        return self._method_name

    def _get_actor_handle(self) -> Any:
        """The live ActorHandle the call was bound on, or None for a ClassNode's actor."""
        return None if isinstance(self._parent_class_node, DAGNode) else self._parent_class_node

    @property
    def num_returns(self) -> Any:
        """The call's num_returns option (None: the method's own)."""
        return self._bound_options.get("num_returns")

    @property
    def is_class_method_call(self) -> bool:
        """True: this node is a call (Ember has no per-output placeholder nodes)."""
        return True

    @property
    def is_class_method_output(self) -> bool:
        """False: Ember has no per-output placeholder nodes."""
        return False

    def __str__(self) -> str:
        return f"(ClassMethodNode, {self._method_name}())"
