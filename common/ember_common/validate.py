"""Request validation at the edge of every service: declarative rules per request message.

A rule is a field path and a check (`validate_rules.RULES` holds every service's, keyed by the
request message's full name). `problems(msg, rules)` names what is wrong, one text per problem
(``lease_id must be 16 bytes, got 3``); `first(msg, rules)` is the first of them or None, and
is fast for a well-formed message: the rules of a message type compile once into a tree by
path and then into one generated predicate (`_fast`), which builds no text. `validate_server`
applies the rules to every request (and every message of a request stream) a server receives.

Paths: ``a.b`` walks into sub-messages (an unset one ends the walk: nothing below it to check);
``xs[]`` applies the rest of the path (or the check) to every element of a repeated field;
``m{}`` to every value of a map field. `REQUIRED` is the presence check (a set sub-message, a
non-empty string, bytes, repeated or map field); every other check runs on the values present
and lets an unset (zero or empty) plain field pass (pair it with REQUIRED when it must be set).
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Callable, Iterator

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
    check.byte_len = n  # type: ignore[attr-defined]  # compared inline by the compiled plan
    return check


def remembered(check: Check) -> Check:
    """check, remembering up to 4096 values it passed: the ids, addresses and runtime envs a
    client sends repeat in every request (its own worker id, its node's), so the hot path pays
    a set lookup instead of a regex or a JSON parse. For checks of hashable, immutable values."""
    good: set[Any] = set()

    def check_remembered(v: Any) -> str | None:
        if v in good:
            return None
        problem = check(v)
        if problem is None:
            if len(good) >= 4096:
                good.clear()
            good.add(v)
        return problem
    check_remembered.__doc__ = check.__doc__
    return check_remembered


_NAME = re.compile(r"[A-Za-z0-9_.:\-]{1,128}")


@remembered
def name_id(v: Any) -> str | None:
    """A textual id (node, worker, client id): up to 128 letters, digits and ``_.:-``."""
    if _NAME.fullmatch(v):
        return None
    return f"must be 1 to 128 letters, digits or '_.:-', got {v[:40]!r}"


@remembered
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
    check.min_value = lo  # type: ignore[attr-defined]  # compared inline by the compiled plan
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


# The largest amount of one resource (2**50, about 1.1e15: Ray keeps amounts as fixed-point
# int64 in units of 1/10000, so it cannot hold more either). Memory in bytes fits with room.
MAX_RESOURCE_AMOUNT = float(2 ** 50)


def resource_map(v: Any) -> str | None:
    """{name: amount}: non-empty names, amounts in [0, MAX_RESOURCE_AMOUNT]."""
    for name in v:  # (a protobuf map's items() is several times slower than this)
        amount = v[name]
        if not name:
            return "has an empty resource name"
        if not 0 <= amount <= MAX_RESOURCE_AMOUNT:
            return f"[{name!r}] must be an amount in [0, {MAX_RESOURCE_AMOUNT:g}], got {amount}"
    return None


def timestamp(v: Any) -> str | None:
    """Seconds since the epoch: 0 (unset) up to the year 2100."""
    return None if 0 <= v <= 4102444800 else f"must be a time in seconds since the epoch (0: unset), got {v}"


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


Predicate = Callable[[Any], bool]


def _fast(node: _Node, desc: Any) -> Predicate:
    """node as one predicate over messages of type desc: True when nothing is wrong. It is
    generated Python (one function, the fields read inline, id lengths compared inline) and
    builds no text: the hot path checks every pushed task. `_run` names the problem after it
    says False; both follow the module docstring's semantics (a unit test holds them equal)."""
    env: dict[str, Any] = {}
    lines = ["def ok(m0):"]
    _emit(node, desc, "m0", 1, lines, env)
    lines.append("    return True")
    exec("\n".join(lines), env)  # noqa: S102 - source built from the rules' field names only
    ok: Predicate = env["ok"]
    return ok


def _emit_checks(checks: list[Check], var: str, pad: str, lines: list[str], env: dict[str, Any]) -> None:
    for check in checks:
        n, lo = getattr(check, "byte_len", None), getattr(check, "min_value", None)
        if n is not None:
            lines.append(f"{pad}if len({var}) != {int(n)}: return False")
        elif lo is not None:
            lines.append(f"{pad}if not {var} >= {float(lo)!r}: return False")
        else:
            key = f"c{len(env)}"
            env[key] = check
            lines.append(f"{pad}if {key}({var}): return False")


def _emit(node: _Node, desc: Any, m: str, depth: int, lines: list[str], env: dict[str, Any]) -> None:
    pad = "    " * depth
    _emit_checks(node.whole, m, pad, lines, env)
    for f in node.fields.values():
        fd = desc.fields_by_name[f.name]
        if not f.name.isidentifier():
            raise ValueError(f"bad field name {f.name!r}")
        v = f"v{len(lines)}"
        if f.many:
            sub = fd.message_type.fields_by_name["value"].message_type if f.is_map else fd.message_type
            lines.append(f"{pad}for {v} in {m}.{f.name}{'.values()' if f.is_map else ''}:")
            _emit_checks(f.checks, v, pad + "    ", lines, env)
            if f.child is not None:
                _emit(f.child, sub, v, depth + 1, lines, env)
            lines.append(f"{pad}    pass")
        elif fd.has_presence:  # a sub-message (or an optional scalar): its checks see an unset value too
            if f.required or f.child is not None:
                lines.append(f"{pad}if {m}.HasField({f.name!r}):")
                if f.child is not None:
                    lines.append(f"{pad}    {v} = {m}.{f.name}")
                    _emit(f.child, fd.message_type, v, depth + 1, lines, env)
                lines.append(f"{pad}    pass")
                if f.required:
                    lines.append(f"{pad}else: return False")
            if f.checks:
                lines.append(f"{pad}{v} = {m}.{f.name}")
                _emit_checks(f.checks, v, pad, lines, env)
        else:  # a plain field: an unset (zero, empty) value passes unless REQUIRED
            lines.append(f"{pad}{v} = {m}.{f.name}")
            lines.append(f"{pad}if {v}:")
            _emit_checks(f.checks, v, pad + "    ", lines, env)
            lines.append(f"{pad}    pass")
            if f.required:
                lines.append(f"{pad}else: return False")


class _Plan:
    __slots__ = ("rules", "node", "ok")

    def __init__(self, rules: list[Rule]) -> None:
        self.rules = rules
        self.node = _compile(rules)
        self.ok: Predicate | None = None  # made for the message type of the first check


_compiled: dict[int, _Plan] = {}


def _plan(rules: list[Rule]) -> _Plan:
    plan = _compiled.get(id(rules))
    if plan is None or plan.rules is not rules:
        plan = _compiled[id(rules)] = _Plan(rules)
    return plan


def problems(msg: Any, rules: list[Rule], label: str = "") -> Iterator[str]:
    """What is wrong with msg under rules, one text per problem, each naming its field (after
    label: "spec." names the fields of a message that sits at `spec` in its request)."""
    return _run(_plan(rules).node, msg, label)


def first(msg: Any, rules: list[Rule], label: str = "") -> str | None:
    """The first of `problems(msg, rules, label)`, or None; fast when msg is well-formed (a
    compiled predicate first, the texts only for a bad message)."""
    plan = _plan(rules)
    ok = plan.ok
    if ok is None:
        ok = plan.ok = _fast(plan.node, msg.DESCRIPTOR)
    return None if ok(msg) else next(_run(plan.node, msg, label), None)


def precompile(rules: list[Rule], desc: Any) -> None:
    """Compiles rules' predicate for messages of type desc now, not at the first check: a
    worker template (the fork server) does it before it forks, so that its children share
    the generated code instead of each making its own copy."""
    plan = _plan(rules)
    if plan.ok is None:
        plan.ok = _fast(plan.node, desc)


def first_problem(msg: Any, rules_by_type: dict[str, list[Rule]]) -> str | None:
    """What is wrong with the first bad field of msg, or None (also when its type has no rules)."""
    rules = rules_by_type.get(msg.DESCRIPTOR.full_name)
    return first(msg, rules) if rules else None
