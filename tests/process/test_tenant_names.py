"""The API refuses to start with a principal whose tenant name the limit-key grammar cannot carry: tenant
`acme/eu` would own the key `tenant:acme/eu`, which is tenant `acme`'s own key `eu`."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.process_fixtures import REPO_ROOT

pytestmark = pytest.mark.timeout(120)


def _principals_file(tmp_path: Path, tenant: str) -> Path:
    digest = hashlib.sha256(b"token").hexdigest()
    path = tmp_path / "tokens.toml"
    path.write_text(f'[[principal]]\ntoken_sha256 = "{digest}"\ntenant = "{tenant}"\n', encoding="utf-8")
    return path


def test_the_api_does_not_start_with_a_tenant_whose_keys_would_be_another_tenants(tmp_path):
    env = {
        **os.environ,
        "DATABASE_URL": "postgresql://127.0.0.1:1/none",
        "JOBS_TOKENS_FILE": str(_principals_file(tmp_path, "acme/eu")),
    }
    run = subprocess.run(
        [sys.executable, "-m", "api_service"], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=60
    )

    assert run.returncode == 2, run.stderr
    assert "configuration error: principal[0]: tenant 'acme/eu' cannot be served" in run.stderr
    assert "Traceback" not in run.stderr
