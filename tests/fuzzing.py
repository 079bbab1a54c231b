"""Random protobuf messages for the fuzz tests (tests/integration/security/test_fuzz_rpcs.py,
test_fuzz_streams.py, tests/unit/security/test_validate.py): every field type filled with plausible and
implausible values (ids of wrong lengths, unknown enum numbers, NaN, negative amounts, bad
addresses), or with valid-looking values only (mostly=True: requests that pass the rules and
reach the services' cores); and what the kit's check must find in a message's bytes."""
from __future__ import annotations

import math
import random

from google.protobuf import message_factory

from ember_common.validate import first_problem
from ember_common.validate_rules import RULES

# Valid-looking values (mostly=True): requests that pass the rules and reach the services' cores.
_GOOD_TEXT = ["", "n-1f2e", "worker_0a", "127.0.0.1:1"]
_GOOD_LENGTHS = [0, 4, 16, 18, 20]
_TEXT = ["", "n-1f2e", "127.0.0.1:1", "worker_0a", "x" * 200, "has space", "héllo:\n", "[::1]:70000",
         '{"env_vars": {}}', "{", "nodes"]
_INTS = [0, 1, -1, -7, 3, 65536, 2**31 - 1]
_FLOATS = [0.0, 0.5, 1.0, -1.0, math.nan, math.inf, 1e300]
_LENGTHS = [0, 1, 3, 4, 16, 18, 20, 24]


def scalar(field, rng: random.Random, mostly: bool = False):
    t = field.type
    if t == field.TYPE_STRING:
        return rng.choice(_GOOD_TEXT if mostly else _TEXT)
    if t == field.TYPE_BYTES:
        return rng.randbytes(rng.choice(_GOOD_LENGTHS if mostly else _LENGTHS))
    if t == field.TYPE_BOOL:
        return rng.random() < 0.5
    if t in (field.TYPE_DOUBLE, field.TYPE_FLOAT):
        return rng.choice(_FLOATS[:3] if mostly else _FLOATS)
    if t == field.TYPE_ENUM:
        return rng.choice([*(v.number for v in field.enum_type.values), *(() if mostly else (9, -3))])
    return rng.choice(_INTS[:2] if mostly else _INTS)


def fill(msg, rng: random.Random, depth: int = 0, mostly: bool = False):
    """msg with a random subset of its fields set to random values (sub-messages to depth 3)."""
    for field in msg.DESCRIPTOR.fields:
        if rng.random() < 0.4:
            continue
        sub = field.message_type
        if sub is not None and sub.GetOptions().map_entry:
            target = getattr(msg, field.name)
            for _ in range(rng.randint(0, 2)):
                key, value = sub.fields_by_name["key"], sub.fields_by_name["value"]
                if value.message_type is None:
                    target[scalar(key, rng, mostly)] = scalar(value, rng, mostly)
        elif sub is not None:
            if depth >= 3:
                continue
            if field.is_repeated:
                for _ in range(rng.randint(0, 2)):
                    fill(getattr(msg, field.name).add(), rng, depth + 1, mostly)
            else:
                fill(getattr(msg, field.name), rng, depth + 1, mostly)
                getattr(msg, field.name).SetInParent()
        elif field.is_repeated:
            getattr(msg, field.name).extend(scalar(field, rng, mostly) for _ in range(rng.randint(0, 3)))
        else:
            setattr(msg, field.name, scalar(field, rng, mostly))
    return msg


def expected_problem(desc, data: bytes) -> str | None:
    """What the service must refuse in data: a parse failure, or the first rule's problem."""
    try:
        msg = message_factory.GetMessageClass(desc).FromString(data)
    except Exception:  # noqa: BLE001 - any parse failure is the caller's fault
        return "the request is not a valid"
    return first_problem(msg, RULES)
