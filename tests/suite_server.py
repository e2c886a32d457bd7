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

import os

import pytest

from tests.db_fixtures import ADMIN_URL_DEFAULT, ADMIN_URL_ENV
from tests.private_postgres import PrivatePostgres, server_programs_installed
from tests.process_fixtures import free_port

MEMORY_FOLDER = "/dev/shm"
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
    server = PrivatePostgres(free_port(), under=under, settings=SUITE_SERVER_SETTINGS)
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
