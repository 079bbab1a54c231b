"""`ember get-auth-token [--generate]`: print the token this machine uses (Ray's command).

The token comes from EMBER_AUTH_TOKEN, else the file at EMBER_AUTH_TOKEN_PATH, else
~/.ember/auth_token. With --generate, a machine without one gets a new ~/.ember/auth_token (0600)
first. The token goes to stdout alone (for `export EMBER_AUTH_TOKEN=$(ember get-auth-token)`);
where it came from goes to stderr.
"""
from __future__ import annotations

import argparse
import sys
from typing import Any


def add_parser(sub: Any) -> None:
    """`get-auth-token`."""
    g = sub.add_parser("get-auth-token", help="print this machine's cluster auth token")
    g.add_argument("--generate", action="store_true",
                   help="create ~/.ember/auth_token (0600) first when no token is configured")
    g.set_defaults(func=cmd_get_auth_token)


def cmd_get_auth_token(ns: argparse.Namespace) -> int:
    """Prints the token; 1 with a one-line error when there is none or it cannot be read."""
    from ember_common import auth

    try:
        src = auth.ensure_token() if ns.generate else auth.load()
    except auth.AuthConfigError as e:
        print(f"ember: error: {e}", file=sys.stderr)
        return 1
    if not src.enabled:
        print(f"ember: error: {src.source}: there is no token", file=sys.stderr)
        return 1
    if src.token is None:
        print(f"ember: error: {src.source}; run `ember get-auth-token --generate` to create one",
              file=sys.stderr)
        return 1
    print(src.token)
    print(f"(from {src.source})", file=sys.stderr)
    return 0
