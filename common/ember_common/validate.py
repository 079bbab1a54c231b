"""Request validation at the edge of every service: declarative rules per request message.

A rule is a field path and a check. `rpc.build_server` wraps every registered method handler
(`wrap_handler`) so that, before the servicer runs, the request is

1. parsed leniently: bytes that are not a valid message of the method's request type (broken
   wire format, invalid UTF-8 in a string field) answer INVALID_ARGUMENT instead of the gRPC
   library's generic failure;
2. checked against the rules of its message type (`validate_rules.RULES`, keyed by the
   message's full name): the first problem answers INVALID_ARGUMENT naming the field, e.g.
   ``/ember.Raylet/ReturnWorker: lease_id must be 16 bytes, got 3``.

The servicer then sees only well-formed requests; the error goes through the kit's one error
table (`rpc.InvalidArgument`). Messages without rules pass after parsing.

Paths: ``a.b`` walks into sub-messages (an unset one ends the walk: nothing below it to check);
``xs[]`` applies the rest of the path (or the check) to every element of a repeated field;
``m{}`` to every value of a map field. `REQUIRED` is the presence check (a set sub-message, a
non-empty string, bytes, repeated or map field); every other check runs on the values present
and lets an unset (zero or empty) plain field pass (pair it with REQUIRED when it must be set).
"""
from __future__ import annotations

import inspect
import math
import re
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import grpc

# A check returns what is wrong with a value, or None.
Check = Callable[[Any], "str | None"]
REQUIRED: Check = lambda v: None  # noqa: E731 - a marker; the walker tests presence itself


@dataclass(frozen=True)
class Rule:
    """One field path (see the module docstring) and its check."""

    path: str
    check: Check

    @property
    def parts(self) -> tuple[str, ...]:
        return tuple(self.path.split(".")) if self.path else ()


def id_bytes(n: int) -> Check:
    """A binary id of exactly n bytes (an unset plain field passes unless REQUIRED; an empty
    element of a repeated field does not)."""
    def check(v: Any) -> str | None:
        return None if len(v) == n else f"must be {n} bytes, got {len(v)}"
    return check


_NAME = re.compile(r"[A-Za-z0-9_.:\-]{1,128}")


def name_id(v: Any) -> str | None:
    """A textual id (node, worker, client id): up to 128 letters, digits and ``_.:-``."""
    if _NAME.fullmatch(v):
        return None
    return f"must be 1 to 128 letters, digits or '_.:-', got {v[:40]!r}"


def address(v: Any) -> str | None:
    """host:port ([v6]:port too), port 1..65535."""
    if not v:
        return None
    host, sep, port = v.rpartition(":")
    if not sep or not host or any(c.isspace() for c in host) or len(v) > 300:
        return f"must be host:port, got {v[:60]!r}"
    if not port.isdigit() or not 0 < int(port) < 65536:
        return f"must end in a port 1..65535, got {v[:60]!r}"
    return None


def port(v: Any) -> str | None:
    """A TCP port number (0 allowed: unset)."""
    return None if 0 <= v < 65536 else f"must be a port 0..65535, got {v}"


def at_least(lo: float) -> Check:
    """A number >= lo (NaN refused)."""
    def check(v: Any) -> str | None:
        return None if v >= lo else f"must be >= {lo:g}, got {v}"
    return check


def not_nan(v: Any) -> str | None:
    """A float that is not NaN (timeouts: negative or infinite may mean "wait forever")."""
    return "must be a number, got NaN" if isinstance(v, float) and math.isnan(v) else None


def enum_of(wrapper: Any) -> Check:
    """A value the enum defines (proto3 keeps unknown numbers; a service must not act on them)."""
    known = frozenset(wrapper.values())

    def check(v: Any) -> str | None:
        return None if v in known else f"must be one of {sorted(wrapper.keys())}, got {v}"
    return check


def resource_map(v: Any) -> str | None:
    """{name: amount}: non-empty names, finite amounts >= 0."""
    for name, amount in v.items():
        if not name:
            return "has an empty resource name"
        if not math.isfinite(amount) or amount < 0:
            return f"[{name!r}] must be a finite amount >= 0, got {amount}"
    return None


def max_len(n: int) -> Check:
    """A string, bytes or repeated field of at most n items."""
    def check(v: Any) -> str | None:
        return None if len(v) <= n else f"must have at most {n} items, got {len(v)}"
    return check


def under(prefix: str, rules: list[Rule]) -> list[Rule]:
    """rules for a message that sits at `prefix` inside another one."""
    return [Rule(f"{prefix}.{r.path}" if r.path else prefix, r.check) for r in rules]


class _Field:
    """One field of a compiled plan: its checks, whether it is required, the plan below it."""

    __slots__ = ("name", "many", "is_map", "required", "checks", "child", "presence")

    def __init__(self, key: str) -> None:
        self.many = key.endswith(("[]", "{}"))
        self.is_map = key.endswith("{}")
        self.name = key[:-2] if self.many else key
        self.required = False
        self.checks: list[Check] = []
        self.child: _Node | None = None
        self.presence: bool | None = None  # the field has HasField (a singular sub-message)


class _Node:
    """Rules compiled into a tree by path, so that each field is read once per request."""

    __slots__ = ("whole", "fields")

    def __init__(self) -> None:
        self.whole: list[Check] = []
        self.fields: dict[str, _Field] = {}


def _compile(rules: list[Rule]) -> _Node:
    root = _Node()
    for rule in rules:
        node, parts = root, rule.parts
        if not parts:
            root.whole.append(rule.check)
            continue
        for i, part in enumerate(parts):
            f = node.fields.get(part) or node.fields.setdefault(part, _Field(part))
            if i == len(parts) - 1:
                if rule.check is REQUIRED:
                    f.required = True
                else:
                    f.checks.append(rule.check)
            else:
                node = f.child = f.child or _Node()
    return root


def _run(node: _Node, msg: Any, label: str) -> Iterator[str]:
    for check in node.whole:
        problem = check(msg)
        if problem:
            yield f"{label.rstrip('.')} {problem}".lstrip()
    for f in node.fields.values():
        value = getattr(msg, f.name)
        here = label + f.name
        if f.many:
            for key, item in (value.items() if f.is_map else enumerate(value)):
                at = f"{here}[{key!r}]"
                for check in f.checks:
                    problem = check(item)
                    if problem:
                        yield f"{at} {problem}"
                if f.child is not None:
                    yield from _run(f.child, item, at + ".")
            continue
        if f.presence is None:
            f.presence = bool(msg.DESCRIPTOR.fields_by_name[f.name].has_presence)
        present = msg.HasField(f.name) if f.presence else bool(value)
        if not present and f.required:
            yield f"{here} is required"
            continue
        if f.child is not None and present:
            yield from _run(f.child, value, here + ".")
        if f.checks and (present or f.presence):  # an unset plain field passes (REQUIRED decides)
            for check in f.checks:
                problem = check(value)
                if problem:
                    yield f"{here} {problem}"


_compiled: dict[int, tuple[list[Rule], _Node]] = {}


def problems(msg: Any, rules: list[Rule]) -> Iterator[str]:
    """What is wrong with msg under rules, one text per problem, each naming its field."""
    hit = _compiled.get(id(rules))
    if hit is None or hit[0] is not rules:
        hit = _compiled[id(rules)] = (rules, _compile(rules))
    return _run(hit[1], msg, "")


def first_problem(msg: Any, rules_by_type: dict[str, list[Rule]]) -> str | None:
    """What is wrong with the first bad field of msg, or None (also when its type has no rules)."""
    rules = rules_by_type.get(msg.DESCRIPTOR.full_name)
    return next(problems(msg, rules), None) if rules else None


class _Malformed:
    """What the lenient deserializer returns for bytes that do not parse."""

    def __init__(self, type_name: str, error: Exception) -> None:
        self.text = f"the request is not a valid {type_name} message ({type(error).__name__}: {error})"


def wrap_handler(handler: Any, method: str, rules_by_type: dict[str, list[Rule]],
                 invalid: Callable[[str], Exception]) -> Any:
    """handler (a grpc RpcMethodHandler with a unary request) with lenient parsing and the
    rules of its request type checked first; other handlers are returned as they are. A bad
    request aborts the call with the status code of `invalid(text)` (rpc.InvalidArgument: the
    kit's error table says INVALID_ARGUMENT)."""
    if handler is None or handler.request_streaming:
        return handler
    parse = handler.request_deserializer
    msg_cls = getattr(parse, "__self__", None)
    if parse is None or msg_cls is None or not hasattr(msg_cls, "DESCRIPTOR"):
        return handler
    type_name = msg_cls.DESCRIPTOR.full_name
    rules = rules_by_type.get(type_name, [])

    def lenient(data: bytes) -> Any:
        try:
            return parse(data)
        except Exception as exc:  # DecodeError, UnicodeDecodeError ...: the caller's fault
            return _Malformed(type_name, exc)

    def problem_of(request: Any) -> str | None:
        if isinstance(request, _Malformed):
            return request.text
        return next(problems(request, rules), None) if rules else None

    async def refuse(context: Any, problem: str) -> None:
        err = invalid(f"{method}: {problem}")
        await context.abort(getattr(err, "code", grpc.StatusCode.INVALID_ARGUMENT), str(err))

    inner = handler.unary_stream if handler.response_streaming else handler.unary_unary
    if handler.response_streaming and inspect.isasyncgenfunction(inner):
        async def stream(request: Any, context: Any) -> Any:
            problem = problem_of(request)
            if problem is not None:
                await refuse(context, problem)
            async for item in inner(request, context):
                yield item
        behavior: Any = stream
    else:
        async def unary(request: Any, context: Any) -> Any:
            problem = problem_of(request)
            if problem is not None:
                await refuse(context, problem)
            result = inner(request, context)
            return (await result) if inspect.isawaitable(result) else result
        behavior = unary
    make = grpc.unary_stream_rpc_method_handler if handler.response_streaming else grpc.unary_unary_rpc_method_handler
    return make(behavior, request_deserializer=lenient, response_serializer=handler.response_serializer)


class Registrar:
    """What `rpc.build_server` hands to the generated `add_*Servicer_to_server` functions: the
    server, except that method handlers get `wrap_handler` on their way in (the per-service
    registered handlers and generic ones alike)."""

    def __init__(self, server: Any, rules: dict[str, list[Rule]], invalid: Callable[[str], Exception]) -> None:
        self._server = server
        self._rules = rules
        self._invalid = invalid

    def add_registered_method_handlers(self, service: str, handlers: dict[str, Any]) -> None:
        """Registers the handlers of `service`, each wrapped."""
        self._server.add_registered_method_handlers(service, {
            name: wrap_handler(h, f"/{service}/{name}", self._rules, self._invalid)
            for name, h in handlers.items()})

    def add_generic_rpc_handlers(self, handlers: Any) -> None:
        """Registers generic handlers whose method handlers are wrapped on first use."""
        self._server.add_generic_rpc_handlers(
            tuple(_Generic(h, self._rules, self._invalid) for h in handlers))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._server, name)


class _Generic(grpc.GenericRpcHandler):
    def __init__(self, inner: Any, rules: dict[str, list[Rule]], invalid: Callable[[str], Exception]) -> None:
        self._inner, self._rules, self._invalid = inner, rules, invalid
        self._wrapped: dict[str, Any] = {}

    def service(self, handler_call_details: Any) -> Any:
        method = handler_call_details.method
        wrapped = self._wrapped.get(method)
        if wrapped is None:
            handler = self._inner.service(handler_call_details)
            if handler is None:
                return None  # not this handler's method (not cached: names come from callers)
            wrapped = self._wrapped[method] = wrap_handler(handler, method, self._rules, self._invalid)
        return wrapped
