"""The message limits of Ember's gRPC servers and channels (settings in config.py; what each
bounds: rpc.py's "Limits" and docs/security.md). Re-exported by rpc; read by chunked, which
rpc's channels use (so neither imports the other for them)."""
from __future__ import annotations

from .config import get_config


def _limit(name: str, value: int) -> int:
    if value <= 0:
        raise ValueError(f"{name} must be > 0, got {value} (no unlimited messages)")
    return value


def message_limit() -> int:
    """EMBER_MAX_MESSAGE_BYTES (config.py): the largest message any channel sends or receives and
    the receive limit of the servers that carry user data (core workers, object managers)."""
    return _limit("EMBER_MAX_MESSAGE_BYTES", get_config().max_message_bytes)


def receive_limit(control: bool) -> int:
    """A server's receive limit: EMBER_MAX_CONTROL_REQUEST_BYTES for a control service (the GCS,
    a raylet), never more than `message_limit()`; `message_limit()` for the others."""
    if not control:
        return message_limit()
    return min(_limit("EMBER_MAX_CONTROL_REQUEST_BYTES", get_config().max_control_request_bytes),
               message_limit())


def data_limit() -> int:
    """The largest request to a control method that carries data (LARGE_CONTROL_METHODS, sent
    in chunks when over `receive_limit(True)`): EMBER_MAX_CONTROL_MESSAGE_BYTES, never more
    than `message_limit()`."""
    return min(_limit("EMBER_MAX_CONTROL_MESSAGE_BYTES", get_config().max_control_message_bytes),
               message_limit())
