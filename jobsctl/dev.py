"""`jobsctl dev`: the local stack of `make run`, for people who reach for the CLI first.

The stack is scripts/dev_stack.py in a source checkout; this replaces the jobsctl process with it, so
Ctrl-C and the exit code are the script's own. A jobsctl installed without the source tree has no stack
to run and says so.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from jobsctl.rpc_errors import EXIT_USAGE

DEV_STACK_SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "dev_stack.py"


def run_dev(stderr: TextIO, exec_program: Callable[[str, list[str]], object] = os.execv) -> int:
    """Does not return when the script exists; returns 2 when it does not."""
    if not DEV_STACK_SCRIPT.is_file():
        print(
            f"jobsctl: `jobsctl dev` runs the local stack from a source checkout ({DEV_STACK_SCRIPT} not found); "
            "clone the repository and run it there, or `make run`",
            file=stderr,
        )
        return EXIT_USAGE
    stderr.flush()
    exec_program(sys.executable, [sys.executable, str(DEV_STACK_SCRIPT)])
    return EXIT_USAGE  # only a stand-in exec_program gets here
