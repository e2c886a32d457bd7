"""`python -m chaos`: a chaos run (CHAOS_SECONDS, CHAOS_SEED, CHAOS_DIR, CHAOS_FAULT_INTERVAL,
CHAOS_STATEMENT_FAULTS, CHAOS_LEASE_SECONDS, CHAOS_SETTLE_SECONDS; docs/CHAOS.md), or
`python -m chaos check HISTORY` to check a recorded history again. Either way the last line printed is
one JSON object with `operations`, `faults` and `violations`; the exit status is 1 when a check failed.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from pathlib import Path

from chaos.checker import Report, check_history
from chaos.config import ChaosConfig
from chaos.history import read_history
from chaos.runner import run_chaos


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m chaos", description=__doc__)
    parser.add_argument("command", nargs="?", choices=["run", "check"], default="run")
    parser.add_argument("history", nargs="?", type=Path, help="with check: the history.jsonl to check")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s", stream=sys.stderr)
    if args.command == "check":
        if args.history is None:
            parser.error("check needs the HISTORY file")
        report = check_history(read_history(args.history))
    else:
        config = ChaosConfig.from_env(os.environ)
        print(f"chaos run: {config.seconds:.0f}s, seed {config.seed} (CHAOS_SEED={config.seed} replays its choices)")
        print(f"history and logs: {config.workdir}")
        try:
            report = asyncio.run(_until_signalled(config))
        except asyncio.CancelledError:
            print("chaos run interrupted: its processes and its private PostgreSQL were stopped", file=sys.stderr)
            return 130
    _print(report)
    return 1 if report.violations else 0


async def _until_signalled(config: ChaosConfig) -> Report:
    """SIGINT or SIGTERM (Ctrl-C, a CI timeout) ends the run cleanly: nothing it started is left running."""
    task = asyncio.current_task()
    assert task is not None
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, task.cancel)
    return await run_chaos(config)


def _print(report: Report) -> None:
    for violation in report.violations[:20]:
        print(
            f"VIOLATION {violation.check}: job {violation.job_id}: {violation.message} (lines {list(violation.lines)})"
        )
    if len(report.violations) > 20:
        print(f"... and {len(report.violations) - 20} more")
    print(report.summary_line())


if __name__ == "__main__":
    sys.exit(main())
