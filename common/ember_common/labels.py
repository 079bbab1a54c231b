"""Node labels and label selectors, as Ray's (pure: no I/O beyond reading a labels file).

A node carries labels, `key: value` strings with Kubernetes' syntax: a key is an optional DNS
subdomain prefix (<= 253 characters) and `/`, then a name (<= 63 characters, alphanumeric at
both ends, `-`, `_`, `.` between); a value is empty or has a name's syntax. Ember sets the
defaults `ray.io/node-id` (always) and `ray.io/accelerator-type` (a node that has one); users
add theirs with `ember start --labels` / `--labels-file` or `ember.init(labels=...)`.

A label selector is a dict `key: expression`, every entry of which a node must satisfy:

| expression | the node's value of `key` |
|---|---|
| `v` | equals v |
| `!v` | is not v (or the node lacks the key) |
| `in(a,b)` | is one of a, b |
| `!in(a,b)` | is none of a, b (or the node lacks the key) |

`parse_selector` checks a selector once (ValueError naming the key and what is wrong) and
returns conditions; `matches` evaluates them against a node's labels.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Mapping

NODE_ID = "ray.io/node-id"
ACCELERATOR_TYPE = "ray.io/accelerator-type"
RESERVED_PREFIX = "ray.io/"
SYSTEM_ONLY = (NODE_ID,)  # defaults a user may not set (the others a user may override)

_NAME = r"[a-zA-Z0-9]([a-zA-Z0-9_.-]{0,61}[a-zA-Z0-9])?"
_NAME_RE = re.compile(_NAME)
_PIECE = r"[a-zA-Z0-9]([a-zA-Z0-9_-]{0,61}[a-zA-Z0-9])?"  # one DNS label of a key's prefix
_PREFIX_RE = re.compile(rf"{_PIECE}(\.{_PIECE})*")
_NAME_RULE = ("63 characters or less, beginning and ending with an alphanumeric character "
              "([a-z0-9A-Z]) with dashes (-), underscores (_), dots (.) and alphanumerics between")


class InvalidLabelError(ValueError):
    """A label key, value or selector that breaks the syntax; the message names it."""


def key_problem(key: Any) -> str | None:
    """Why `key` is not a valid label key, or None."""
    if not isinstance(key, str):
        return f"label key {key!r} is a {type(key).__name__}, not a string"
    prefix, _, name = key.rpartition("/")
    if "/" in key and (len(prefix) > 253 or not _PREFIX_RE.fullmatch(prefix)):
        return (f"invalid label key prefix {prefix!r} in {key!r}: a prefix is DNS labels separated by "
                "dots, 253 characters or less")
    if len(name) > 63 or not _NAME_RE.fullmatch(name):
        return f"invalid label key name {name!r} in {key!r}: a name is {_NAME_RULE}"
    return None


def value_problem(key: str, value: Any) -> str | None:
    """Why `value` is not a valid value of label `key`, or None (empty is valid)."""
    if not isinstance(value, str):
        return f"the value of label {key!r} is a {type(value).__name__} ({value!r}), not a string"
    if value and (len(value) > 63 or not _NAME_RE.fullmatch(value)):
        return f"invalid value {value!r} of label {key!r}: a value is empty or {_NAME_RULE}"
    return None


def validate_node_labels(labels: Any, source: str = "labels", *,
                         system: bool = False) -> dict[str, str]:
    """Checks a node's labels (a dict of str to str); InvalidLabelError naming `source` and the
    bad entry. A user (system=False) may not set `ray.io/node-id`."""
    if labels is None:
        return {}
    if not isinstance(labels, Mapping):
        raise InvalidLabelError(f"{source}: node labels must be a dict of str to str, got "
                                f"{type(labels).__name__}")
    for k, v in labels.items():
        problem = key_problem(k) or value_problem(k, v)
        if problem is None and not system and k in SYSTEM_ONLY:
            problem = f"label {k!r} is set by Ember for every node; it cannot be given"
        if problem:
            raise InvalidLabelError(f"{source}: {problem}")
    return dict(labels)


def parse_cli(raw: str, source: str = "--labels") -> dict[str, str]:
    """`ember start --labels`: Ray's `k1=v1,k2=v2`, or a JSON object (Ray's older form)."""
    text = raw.strip()
    if len(text) > 1 and text[0] == text[-1] == '"':
        text = text[1:-1].strip()
    if text.startswith("{"):
        try:
            labels = json.loads(text)
        except ValueError as e:
            raise InvalidLabelError(f"{source}: not valid JSON ({e})") from None
        return validate_node_labels(labels, source)
    out: dict[str, str] = {}
    for pair in filter(None, (p.strip() for p in text.split(","))):
        k, eq, v = pair.partition("=")
        if not eq or "=" in v:
            raise InvalidLabelError(f"{source}: {pair!r} is not a key=value pair")
        out[k.strip()] = v.strip()
    return validate_node_labels(out, source)


def parse_file(path: str, source: str = "--labels-file") -> dict[str, str]:
    """`ember start --labels-file`: a YAML mapping of label keys to string values."""
    import yaml

    try:
        with open(path) as f:
            labels = yaml.safe_load(f)
    except OSError as e:
        raise InvalidLabelError(f"{source} {path}: {e.strerror or e}") from None
    except yaml.YAMLError as e:
        raise InvalidLabelError(f"{source} {path}: not valid YAML ({e})") from None
    if not isinstance(labels, dict):
        raise InvalidLabelError(f"{source} {path}: must hold a mapping of label keys to values")
    return validate_node_labels(labels, f"{source} {path}")


@dataclass(frozen=True)
class Condition:
    """One selector entry: the node's value of `key` is (negate: is not) one of `values`."""

    key: str
    values: frozenset[str]
    negate: bool

    def holds(self, labels: Mapping[str, str]) -> bool:
        value = labels.get(self.key)
        inside = value is not None and value in self.values
        return not inside if self.negate else inside


Selector = tuple[Condition, ...]


def _condition(key: str, expr: Any, source: str) -> Condition:
    if not isinstance(expr, str):
        raise InvalidLabelError(f"{source}: the selector of label {key!r} is a "
                                f"{type(expr).__name__} ({expr!r}), not a string")
    negate = expr.startswith("!")
    body = expr[1:] if negate else expr
    listed = body.startswith("in(") and body.endswith(")")
    if listed:
        values = [v.strip() for v in body[3:-1].split(",")]
    elif "(" in body or ")" in body:
        raise InvalidLabelError(f"{source}: selector {expr!r} of label {key!r}: the only operators "
                                "are !value, in(a,b) and !in(a,b)")
    else:
        values = [body]
    for v in values:
        if not v or not (len(v) <= 63 and _NAME_RE.fullmatch(v)):
            if not v and not listed and not negate:
                continue  # Ray: an empty selector value matches an empty label value
            raise InvalidLabelError(f"{source}: selector {expr!r} of label {key!r}: value {v!r} is "
                                    f"not {_NAME_RULE}")
    return Condition(key, frozenset(values), negate)


def parse_selector(selector: Any, source: str = "label_selector") -> Selector:
    """Checks a label selector (None or {} selects every node); InvalidLabelError naming the
    bad key or expression."""
    if selector is None:
        return ()
    if not isinstance(selector, Mapping):
        raise InvalidLabelError(f"{source} must be a dict of label key to expression, got "
                                f"{type(selector).__name__}")
    out = []
    for k, expr in selector.items():
        problem = key_problem(k)
        if problem:
            raise InvalidLabelError(f"{source}: {problem}")
        out.append(_condition(k, expr, source))
    return tuple(out)


def matches(labels: Mapping[str, str], selector: Selector) -> bool:
    """Whether a node with these labels satisfies every condition."""
    return all(c.holds(labels) for c in selector)


def describe(selector: Mapping[str, str]) -> str:
    """A selector for messages: {k: expr, ...}."""
    return "{" + ", ".join(f"{k!r}: {v!r}" for k, v in sorted(selector.items())) + "}"
