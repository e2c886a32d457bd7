"""Running the real `python -m jobsctl` as a user would, against a ServiceStack's API."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass

from tests.process_fixtures import REPO_ROOT, tenant_token

CLI_TIMEOUT_SECONDS = 30


@dataclass(frozen=True)
class CliRun:
    code: int
    stdout: bytes
    stderr: str

    @property
    def text(self) -> str:
        return self.stdout.decode()


def cli_env(target: str, tenant: str, token: str | None = None) -> dict[str, str]:
    token = token or tenant_token(tenant)
    return {**os.environ, "JOBS_API_TARGET": target, "JOBS_TOKEN": token, "PYTHONUNBUFFERED": "1"}


def jobsctl(target: str, *args: str, tenant: str = "acme", stdin: bytes = b"", token: str | None = None) -> CliRun:
    """`token` overrides the tenant's (an operator's, for the admin commands)."""
    done = subprocess.run(
        [sys.executable, "-m", "jobsctl", *args],
        input=stdin,
        env=cli_env(target, tenant, token),
        cwd=REPO_ROOT,
        capture_output=True,
        timeout=CLI_TIMEOUT_SECONDS,
        check=False,
    )
    return CliRun(done.returncode, done.stdout, done.stderr.decode(errors="replace"))


def start_jobsctl(target: str, *args: str, tenant: str = "acme") -> subprocess.Popen:
    """For commands that run on while the test acts (watch)."""
    return subprocess.Popen(
        [sys.executable, "-m", "jobsctl", *args],
        env=cli_env(target, tenant),
        cwd=REPO_ROOT,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
