"""Runtime environments, the client's side (Ray 2.60's `runtime_env`).

- validation.py: field checks, normalisation, Ray's merge rule, canonical serialization, hash;
- packaging.py: working_dir / py_modules zipped once, content addressed, uploaded once to the
  GCS KV, gitignore-style `excludes`, the size limit;
- context.py: the job's env (ember.init), the parent env of a worker, `resolve()` for a new
  task or actor.

The node's side (fetching packages, unpacking, pip virtualenvs, workers started in the env)
is the raylet's `ember_raylet.runtime_env`; the public classes are `ember.runtime_env`.
"""
from __future__ import annotations

SETUP_ERROR_PREFIX = "RuntimeEnvSetupError: "


def setup_error_from(message: str) -> str | None:
    """The setup failure carried by a raylet's FAILED_PRECONDITION (or an actor's death
    cause), or None when the message is not one."""
    i = message.find(SETUP_ERROR_PREFIX)
    return message[i + len(SETUP_ERROR_PREFIX):] if i >= 0 else None
