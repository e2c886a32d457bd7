"""The suite's own PostgreSQL server, started once per run when no `JOBS_TEST_ADMIN_URL` names one.

Every test makes and drops databases and commits often; on the machine's shared server each commit
waits for its WAL to reach the disk and each `DROP DATABASE` ends with a checkpoint of the whole server
(0.1 s quiet, seconds while other suites share it). This server is the same PostgreSQL, initdb'd into
memory (`/dev/shm`) with `fsync` and `full_page_writes` off: what the tests check (statements, locks,
transactions, triggers, roles, security) is unchanged; only durability across a crash of the machine,
which no test of this tier relies on, is given up. The tests that crash, stop or fail over PostgreSQL
start servers of their own (tests/private_postgres.py), durable as shipped.

Started by the first pytest process (the xdist controller, or the only process), before the workers,
which inherit the URL through the environment; destroyed after the run. Set `JOBS_TEST_ADMIN_URL` to run
the suite on a server of your choosing instead (`JOBS_TEST_ADMIN_URL=$DATABASE_URL make test`); without
PostgreSQL's server programs installed, the suite uses `DATABASE_URL`, else 127.0.0.1:5432.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
from pathlib import Path

import pytest

from tests.db_fixtures import ADMIN_URL_DEFAULT, ADMIN_URL_ENV, pid_is_running
from tests.private_postgres import PrivatePostgres, server_programs_installed
from tests.process_fixtures import free_port

MEMORY_FOLDER = "/dev/shm"
# Named after the pytest process that started it, so that the next run stops and removes a server whose
# run was killed before it could (its memory is the machine's until then).
FOLDER_PREFIX = "jobs-suite-pg-"
# Room for four xdist workers' pools, droppers and service processes; buffers for the clones in use.
SUITE_SERVER_SETTINGS = {
    "fsync": "off",
    "full_page_writes": "off",
    "max_connections": "400",
    "shared_buffers": "256MB",
}
_SERVER = pytest.StashKey[PrivatePostgres]()


def pytest_configure(config: pytest.Config) -> None:
    if hasattr(config, "workerinput") or os.environ.get(ADMIN_URL_ENV):
        return  # an xdist worker (the controller's server is in its environment), or a server was named
    if not server_programs_installed():
        os.environ[ADMIN_URL_ENV] = os.environ.get("DATABASE_URL") or ADMIN_URL_DEFAULT
        return
    under = MEMORY_FOLDER if os.path.isdir(MEMORY_FOLDER) else None
    if under is not None:
        _remove_abandoned(Path(under))
    server = PrivatePostgres(
        free_port(), under=under, prefix=f"{FOLDER_PREFIX}{os.getpid()}-", settings=SUITE_SERVER_SETTINGS
    )
    try:
        server.start()
    except BaseException:
        server.destroy()
        raise
    config.stash[_SERVER] = server
    os.environ[ADMIN_URL_ENV] = server.admin_url()


def pytest_unconfigure(config: pytest.Config) -> None:
    server = config.stash.get(_SERVER, None)
    if server is not None:
        server.destroy()


def _remove_abandoned(folder: Path) -> None:
    """Stops (SIGQUIT: PostgreSQL's immediate shutdown) and removes the servers of runs that were killed."""
    for root in folder.glob(f"{FOLDER_PREFIX}*"):
        owner = re.match(rf"{FOLDER_PREFIX}(\d+)-", root.name)
        if owner is None or pid_is_running(int(owner[1])):
            continue
        with contextlib.suppress(OSError, ValueError, IndexError):
            os.kill(int((root / "data" / "postmaster.pid").read_text().splitlines()[0]), signal.SIGQUIT)
        shutil.rmtree(root, ignore_errors=True)
