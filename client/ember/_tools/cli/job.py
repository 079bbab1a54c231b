"""`ember job submit|status|logs|stop`: Ray's job submission (`ember._tools.job_submission`
holds the supervisor actor and the commands)."""
from __future__ import annotations

import argparse
from typing import Any


def add_parser(sub: Any) -> None:
    """`job` and its actions."""
    from ember._tools import job_submission

    job_submission.add_parser(sub)
    sub.choices["job"].set_defaults(func=cmd_job)


def cmd_job(ns: argparse.Namespace) -> int:
    """Runs one job action."""
    from ember._tools import job_submission

    return int(job_submission.main(ns))
