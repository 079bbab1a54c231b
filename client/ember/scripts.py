"""`python -m ember.scripts ...` still runs the `ember` command, whose code now lives in
`ember._tools.cli` (one module per command group); the console script is
`ember._tools.cli:main`."""
from __future__ import annotations

import sys

from ember._tools.cli import build_parser, main

__all__ = ["build_parser", "main"]

if __name__ == "__main__":
    sys.exit(main())
