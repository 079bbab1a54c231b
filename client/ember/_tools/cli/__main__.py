"""`python -m ember._tools.cli ...` is the `ember` command."""
from __future__ import annotations

import sys

from . import main

sys.exit(main())
