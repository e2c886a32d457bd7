"""`python -m benchmarks.console_pages`: how long the operator console's pages take to answer with
BENCH_CONSOLE_JOBS (100,000) jobs in the database, inserted by SQL; median and p95 of each page.

It prints a table, then one JSON line. The figures are server time plus one loopback round trip (the
HTML, not the static files a browser caches)."""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.parse
from pathlib import Path

import psycopg

from benchmarks.harness import REPO, free_port, fresh_database, median, percentile

ADMIN_TOKEN = "bench-admin-token"
ROUNDS = 15
START_TIMEOUT_SECONDS = 30.0
# Six in ten succeeded, two pending, one failed (with an attempt error and a traceback), one waiting to retry.
INSERT_JOBS = """
INSERT INTO jobs (tenant, kind, state, payload, max_attempts, retry_budget, attempts, fencing_token,
                  created_at, run_after, finished_at, last_error_category, last_error_message, labels)
SELECT 'tenant-' || (i %% 20),
       (ARRAY['echo', 'sleep', 'flaky', 'summarize'])[1 + i %% 4],
       s.state::job_state,
       convert_to('{"order": ' || i || '}', 'UTF8'),
       3, 3,
       CASE WHEN s.state = 'pending' THEN 0 ELSE 1 END,
       CASE WHEN s.state = 'pending' THEN 0 ELSE 1 END,
       now() - make_interval(secs => i),
       now() - make_interval(secs => i),
       CASE WHEN s.state IN ('succeeded', 'failed') THEN now() - make_interval(secs => i) - interval '1 second' END,
       CASE WHEN s.state IN ('failed', 'retry_wait') THEN 'retryable'::error_category END,
       CASE WHEN s.state IN ('failed', 'retry_wait') THEN 'upstream timeout talking to ledger shard ' || (i %% 50) END,
       jsonb_build_object('batch', (i %% 100)::text)
FROM generate_series(1, %(jobs)s) AS i,
     LATERAL (SELECT CASE WHEN i %% 10 < 6 THEN 'succeeded' WHEN i %% 10 < 8 THEN 'pending'
                          WHEN i %% 10 = 8 THEN 'failed' ELSE 'retry_wait' END AS state) AS s
"""
INSERT_ERRORS = """
INSERT INTO job_attempt_errors (job_id, tenant, attempt, fencing_token, category, message, traceback)
SELECT job_id, tenant, 1, 1, 'retryable', last_error_message,
       E'Traceback (most recent call last):\\n  File "handlers.py", line 12, in run\\n'
       || 'TimeoutError: ' || last_error_message
FROM jobs WHERE state IN ('failed', 'retry_wait')
"""


def main() -> int:
    jobs = int(os.environ.get("BENCH_CONSOLE_JOBS", "100000"))
    with fresh_database("console") as url:
        failed_job = _fill(url, jobs)
        with tempfile.TemporaryDirectory(prefix="jobs-bench-console-") as workdir:
            listen = f"127.0.0.1:{free_port()}"
            api = _start_api(url, Path(workdir), listen)
            try:
                figures = _measure(listen, failed_job)
            finally:
                api.terminate()
                api.wait(30)
    print(f"{'page':<44} {'median':>9} {'p95':>9}")
    for page, (p50, p95) in figures.items():
        print(f"{page:<44} {p50 * 1000:>7.1f}ms {p95 * 1000:>7.1f}ms")
    print(json.dumps({"jobs": jobs, **{k: {"median_s": v[0], "p95_s": v[1]} for k, v in figures.items()}}))
    return 0


def _fill(url: str, jobs: int) -> str:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(INSERT_JOBS, {"jobs": jobs})
        conn.execute(INSERT_ERRORS)
        conn.execute("ANALYZE")
        row = conn.execute("SELECT job_id FROM jobs WHERE state = 'failed' LIMIT 1").fetchone()
    assert row is not None
    return str(row[0])


def _start_api(url: str, workdir: Path, listen: str) -> subprocess.Popen[bytes]:
    tokens = workdir / "tokens.toml"
    digest = hashlib.sha256(ADMIN_TOKEN.encode()).hexdigest()
    tokens.write_text(f'[[principal]]\ntoken_sha256 = "{digest}"\nrole = "admin"\nname = "bench"\n')
    env = {
        **os.environ,
        "DATABASE_URL": url,
        "JOBS_TOKENS_FILE": str(tokens),
        "JOBS_API_LISTEN": f"127.0.0.1:{free_port()}",
        "JOBS_CONSOLE_LISTEN": listen,
        "JOBS_LOG_LEVEL": "WARNING",
    }
    log = (workdir / "api.log").open("wb")
    api = subprocess.Popen([sys.executable, "-m", "api_service"], cwd=REPO, env=env, stdout=log, stderr=log)
    deadline = time.monotonic() + START_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        try:
            _get(listen, "/signin", {})
            return api
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"the console did not start; see {workdir / 'api.log'}")


def _measure(listen: str, failed_job: str) -> dict[str, tuple[float, float]]:
    cookies = _sign_in(listen)
    pages = {
        "queues": "/queues",
        "job search, first page": "/jobs",
        "job search, state + tenant": "/jobs?state=failed&tenant=tenant-3",
        "job search, error text": "/jobs?" + urllib.parse.urlencode({"error": "ledger shard 17"}),
        "job search, label": "/jobs?label=batch%3D7",
        "job search, time range": "/jobs?from=2000-01-01T00:00&to=2100-01-01T00:00&size=200",
        "job page": f"/jobs/{failed_job}",
    }
    figures = {}
    for name, path in pages.items():
        _get(listen, path, cookies)  # warm: the first statement of a kind is planned and cached
        times = []
        for _ in range(ROUNDS):
            started = time.perf_counter()
            status, _, _ = _get(listen, path, cookies)
            times.append(time.perf_counter() - started)
            assert status == 200, (name, status)
        figures[name] = (median(times), percentile(times, 95))
    return figures


def _sign_in(listen: str) -> dict[str, str]:
    _, headers, body = _get(listen, "/signin", {})
    csrf = re.search(r'name="csrf_token" value="([^"]+)"', body)
    assert csrf
    cookies = {"jobs_console_signin": _cookie(headers, "jobs_console_signin")}
    form = urllib.parse.urlencode({"token": ADMIN_TOKEN, "csrf_token": csrf.group(1)})
    _, headers, _ = _request(listen, "POST", "/signin", cookies, form)
    return {"jobs_console_session": _cookie(headers, "jobs_console_session")}


def _cookie(headers: http.client.HTTPMessage, name: str) -> str:
    for value in headers.get_all("Set-Cookie") or []:
        if value.startswith(name + "="):
            return value.split(";", 1)[0].split("=", 1)[1]
    raise AssertionError(f"no {name} cookie")


def _get(listen: str, path: str, cookies: dict[str, str]) -> tuple[int, http.client.HTTPMessage, str]:
    return _request(listen, "GET", path, cookies, None)


def _request(
    listen: str, method: str, path: str, cookies: dict[str, str], form: str | None
) -> tuple[int, http.client.HTTPMessage, str]:
    host, port = listen.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=60)
    headers = {"Cookie": "; ".join(f"{k}={v}" for k, v in cookies.items())}
    if form is not None:
        headers["Content-Type"] = "application/x-www-form-urlencoded"
    try:
        conn.request(method, path, body=form, headers=headers)
        response = conn.getresponse()
        return response.status, response.headers, response.read().decode()
    finally:
        conn.close()


if __name__ == "__main__":
    sys.exit(main())
