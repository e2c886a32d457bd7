"""Running `jobsctl` as a user would, against a ServiceStack's API: its `main(argv)` in this process with
the user's environment, standard input and outputs, or (`start_jobsctl`) as a process of its own."""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
from dataclasses import dataclass
from unittest import mock

from jobsctl.__main__ import main
from jobsctl.commands import Console
from tests.process_fixtures import REPO_ROOT, tenant_token


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
    """`jobsctl ARGS` with JOBS_API_TARGET and JOBS_TOKEN set; `token` overrides the tenant's (an
    operator's, for the admin commands). The exit code is main()'s, or argparse's when it exits."""
    stdout_bytes = io.BytesIO()
    # write_through: text and bytes reach the one buffer in the order written, as on a real stdout.
    stdout = io.TextIOWrapper(stdout_bytes, encoding="utf-8", write_through=True)
    stderr = io.StringIO()
    console = Console(io.BytesIO(stdin), stdout, stdout_bytes, stderr)
    with (
        mock.patch.dict(os.environ, cli_env(target, tenant, token), clear=True),
        contextlib.redirect_stdout(stdout),
        contextlib.redirect_stderr(stderr),
    ):
        try:
            code = main(list(args), console)
        except SystemExit as exit_:
            code = 0 if exit_.code is None else exit_.code if isinstance(exit_.code, int) else 1
    stdout.flush()
    return CliRun(code, stdout_bytes.getvalue(), stderr.getvalue())


def start_jobsctl(target: str, *args: str, tenant: str = "acme") -> subprocess.Popen:
    """`python -m jobsctl` as a process, for commands that run on while the test acts (watch)."""
    return subprocess.Popen(
        [sys.executable, "-m", "jobsctl", *args],
        env=cli_env(target, tenant),
        cwd=REPO_ROOT,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
