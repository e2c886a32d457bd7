"""The operator console in a real browser (Debian's chromium driven by Playwright) against the real API
and a worker: sign in, find a failed job by its error text, read its traceback, retry it and watch it
succeed without reloading; markup that tenants and handlers wrote stays text. Screenshots of each page
are saved (the path is printed) to be looked at."""

from __future__ import annotations

import functools
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from jobs.v1 import jobs_pb2
from tests.console_client import start_with_console
from tests.process_fixtures import ADMIN_TOKEN, ServiceStack, wait_until

pytestmark = pytest.mark.e2e
CHROMIUM = shutil.which("chromium")
# Polled pages change within a few seconds; a busy machine gets more.
UI_TIMEOUT_MS = 30_000
XSS_MARKUP = '<script>window.__xss = 1</script><img src=x onerror="window.__xss = 2">'


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    if CHROMIUM is None:
        # As for pgbouncer and pg_autoctl: a missing tool fails the run rather than passing it unseen.
        pytest.fail("chromium is not installed (make system-deps installs it)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture
def screenshots() -> Path:
    directory = Path(tempfile.mkdtemp(prefix="console-screenshots-"))
    print(f"\nconsole screenshots in {directory}")
    return directory


@pytest.mark.timeout(240)
def test_an_operator_finds_a_failed_job_retries_it_and_watches_it_succeed(
    service_stack: ServiceStack, browser, screenshots: Path
) -> None:
    from playwright.sync_api import expect

    console = start_with_console(service_stack)
    service_stack.start_worker("w1", JOBS_HANDLER_MODULES="tests.handlers_for_tests")
    acme, globex = service_stack.tenant("acme"), service_stack.tenant("globex")
    failing = acme.submit("crash.until_retried", b'{"invoice": 42}', labels={"team": "billing"}).job.job_id
    for n in range(6):
        globex.submit("echo", f"hello {n}".encode())
    acme.submit("sleep", b'{"seconds": 120}')
    marked = globex.submit("echo", XSS_MARKUP.encode(), labels={"note": XSS_MARKUP}).job.job_id
    wait_until(lambda: acme.get(failing).state == jobs_pb2.JOB_STATE_FAILED, timeout=60, what="the job to fail")

    page = browser.new_page(viewport={"width": 1360, "height": 900})
    dialogs: list[str] = []

    def refuse_dialog(dialog) -> None:
        dialogs.append(dialog.message)
        dialog.dismiss()

    page.on("dialog", refuse_dialog)
    page.goto(f"{console}/queues")
    expect(page).to_have_url(f"{console}/signin")
    page.fill("#token", ADMIN_TOKEN)
    page.click("button[type=submit]")
    expect(page.locator("h1")).to_have_text("Queues")
    expect(page.locator("table.queues")).to_contain_text("crash.until_retried", timeout=UI_TIMEOUT_MS)
    page.screenshot(path=str(screenshots / "1-queues.png"), full_page=True)

    page.click("header nav >> text=Jobs")
    page.fill("input[name=error]", "ledger mismatch")
    page.check("input[name=state][value=failed]")
    page.click("form.search button[type=submit]")
    rows = page.locator("table.jobs tbody tr")
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text("ledger mismatch on attempt 2")
    page.screenshot(path=str(screenshots / "2-search.png"), full_page=True)

    rows.first.locator("a").first.click()
    expect(page).to_have_url(f"{console}/jobs/{failing}")
    expect(page.locator("pre.traceback").first).to_contain_text("ValueError")
    expect(page.locator("pre.traceback").first).to_contain_text("crash_until_retried")
    expect(page.locator(".attempt")).to_have_count(2)
    page.screenshot(path=str(screenshots / "3-failed-job.png"), full_page=True)

    page.fill("form[action$=retry] input[name=reason]", "ledger fixed upstream")
    page.click("form[action$=retry] button[type=submit]")
    expect(page.locator(".flash.ok")).to_contain_text("Retry recorded")
    # No reload from here on: the live part of the page polls.
    expect(page.locator(".summary .state.big")).to_have_text("succeeded", timeout=UI_TIMEOUT_MS)
    expect(page.locator("table.events")).to_contain_text("admin:ops")
    expect(page.locator("table.events")).to_contain_text("ledger fixed upstream")
    page.screenshot(path=str(screenshots / "4-retried-job.png"), full_page=True)
    assert acme.result(failing).payload == b"reconciled on attempt 3"

    page.goto(f"{console}/jobs/{marked}")
    expect(page.locator("pre.preview").first).to_contain_text("<script>window.__xss = 1</script>")
    page.goto(f"{console}/jobs?label=note%3D" + XSS_MARKUP.replace(" ", "%20").replace('"', "%22"))
    expect(page.locator("input[name=label]")).to_have_value(f"note={XSS_MARKUP}")
    page.goto(f"{console}/jobs/{failing}")
    page.screenshot(path=str(screenshots / "5-markup-as-text.png"), full_page=True)
    assert page.evaluate("window.__xss") is None and dialogs == []


@pytest.mark.timeout(240)
def test_a_bulk_retry_counts_first_then_reopens_every_match(
    service_stack: ServiceStack, browser, screenshots: Path
) -> None:
    from playwright.sync_api import expect

    console = start_with_console(service_stack)
    service_stack.start_worker("w1", JOBS_HANDLER_MODULES="tests.handlers_for_tests")
    acme, globex = service_stack.tenant("acme"), service_stack.tenant("globex")
    batch = [t.submit("crash.until_retried", b"{}", labels={"batch": "b7"}).job.job_id for t in (acme, acme, globex)]
    other = acme.submit("crash.until_retried", b"{}", labels={"batch": "b8"}).job.job_id
    owners = {batch[0]: acme, batch[1]: acme, batch[2]: globex, other: acme}

    def state_is(state: int, job_id: str) -> bool:
        return owners[job_id].get(job_id).state == state

    for job_id in owners:
        wait_until(functools.partial(state_is, jobs_pb2.JOB_STATE_FAILED, job_id), timeout=60, what="failure")

    page = browser.new_page(viewport={"width": 1360, "height": 900})
    page.goto(f"{console}/signin")
    page.fill("#token", ADMIN_TOKEN)
    page.click("button[type=submit]")
    page.goto(f"{console}/jobs?state=failed&label=batch%3Db7")
    expect(page.locator("table.jobs tbody tr")).to_have_count(3)
    page.select_option("form.bulk-form select[name=action]", "retry")
    page.fill("form.bulk-form input[name=reason]", "ledger shard back")
    page.click("form.bulk-form button[type=submit]")
    expect(page.locator("section.confirm h1")).to_have_text("3 jobs would be retried")
    page.screenshot(path=str(screenshots / "6-bulk-dry-run.png"), full_page=True)
    for job_id, owner in owners.items():
        assert owner.get(job_id).state == jobs_pb2.JOB_STATE_FAILED, "a dry run changes nothing"

    page.click("section.confirm button[type=submit]")
    expect(page.locator(".flash.ok")).to_contain_text("3 of 3 matching jobs reopened")
    for job_id in batch:
        wait_until(functools.partial(state_is, jobs_pb2.JOB_STATE_SUCCEEDED, job_id), timeout=60, what="the retry")
    assert acme.get(other).state == jobs_pb2.JOB_STATE_FAILED, "a job outside the search is left alone"
    page.goto(f"{console}/jobs?state=succeeded&label=batch%3Db7")
    expect(page.locator("table.jobs tbody tr")).to_have_count(3)
    page.screenshot(path=str(screenshots / "7-bulk-done.png"), full_page=True)
    page.goto(f"{console}/kinds")
    page.screenshot(path=str(screenshots / "8-kinds.png"), full_page=True)
