"""The operator console's security over plain HTTP, against the API (in this process): who may sign in, the
cookies, the CSRF token on every action, the Content-Security-Policy, and escaping of what tenants wrote."""

from __future__ import annotations

import json
import re
import urllib.parse
from pathlib import Path

import grpc
import pytest

from jobs.v1 import jobs_pb2
from tests.console_client import ConsoleClient, start_with_console
from tests.process_fixtures import ADMIN_TOKEN, READONLY_TOKEN, WORKER_TOKEN, ServiceStack, tenant_token, wait_until

XSS = '<script>alert("xss")</script><img src=x onerror=alert(1)>'


@pytest.fixture
def console(service_stack: ServiceStack) -> str:
    return start_with_console(service_stack)


def signed_in(base_url: str, token: str = ADMIN_TOKEN) -> ConsoleClient:
    client = ConsoleClient(base_url)
    answer = client.sign_in(token)
    assert answer.status == 303, answer.body
    return client


def test_pages_need_a_session(console: str) -> None:
    client = ConsoleClient(console)
    for path in ("/queues", "/jobs", "/jobs/00000000-0000-0000-0000-000000000000", "/queues/live"):
        answer = client.get(path)
        assert answer.status == 303 and answer.header("Location") == "/signin", path
    assert client.get("/queues/live", HX_Request="true").header("HX-Redirect") == "/signin"


@pytest.mark.parametrize("token", [tenant_token("acme"), WORKER_TOKEN, "not-a-token"])
def test_only_operator_tokens_sign_in(console: str, token: str) -> None:
    client = ConsoleClient(console)
    answer = client.sign_in(token)
    assert answer.status == 403
    assert "jobs_console_session" not in client.cookies
    assert client.get("/queues").status == 303


def test_session_cookie_is_httponly_secure_and_strict(console: str) -> None:
    client = ConsoleClient(console)
    answer = client.sign_in(ADMIN_TOKEN)
    cookie = next(c for c in answer.set_cookies() if c.startswith("jobs_console_session="))
    attributes = {part.strip().split("=")[0].lower() for part in cookie.split(";")[1:]}
    assert {"httponly", "secure", "samesite"} <= attributes
    assert "samesite=strict" in cookie.lower()
    assert ADMIN_TOKEN not in cookie
    assert client.get("/queues").status == 200


def test_every_answer_carries_a_strict_content_security_policy(console: str) -> None:
    client = signed_in(console)
    for path in ("/signin", "/queues", "/jobs", "/static/console.css"):
        answer = client.get(path)
        policy = answer.header("Content-Security-Policy")
        directives = dict(d.strip().split(" ", 1) for d in policy.split(";"))
        assert directives["default-src"] == "'none'", path
        assert directives["script-src"] == "'self'" and directives["style-src"] == "'self'", path
        assert directives["frame-ancestors"] == "'none'", path
        assert "unsafe" not in policy, path
        assert answer.header("X-Content-Type-Options") == "nosniff"
    page = client.get("/queues").body
    assert "<script>" not in page and "style=" not in page and " on" + "click" not in page


def test_actions_without_the_csrf_token_are_refused(service_stack: ServiceStack, console: str) -> None:
    job_id = service_stack.tenant("acme").submit("echo", b"x", run_after=None).job.job_id
    client = signed_in(console)
    csrf = client.csrf_token(f"/jobs/{job_id}")
    for form in ({"reason": "no token"}, {"reason": "wrong token", "csrf_token": csrf[:-2] + "xx"}):
        answer = client.post(f"/jobs/{job_id}/cancel", form)
        assert answer.status == 403, form
    assert client.post("/signout", {}).status == 403
    other_site = client.post(f"/jobs/{job_id}/cancel", {"reason": "r", "csrf_token": csrf}, Origin="http://evil.test")
    assert other_site.status == 403
    assert service_stack.tenant("acme").get(job_id).state == jobs_pb2.JOB_STATE_PENDING
    answer = client.post(f"/jobs/{job_id}/cancel", {"reason": "by the book", "csrf_token": csrf})
    assert answer.status == 303
    events = client.get(f"/jobs/{job_id}").body
    assert "admin:ops" in events and "by the book" in events


def test_sign_in_needs_its_own_csrf_cookie(console: str) -> None:
    client = ConsoleClient(console)
    assert client.post("/signin", {"token": ADMIN_TOKEN}).status == 403
    assert client.post("/signin", {"token": ADMIN_TOKEN, "csrf_token": "made-up"}).status == 403


def test_a_read_only_operator_sees_but_cannot_act(service_stack: ServiceStack, console: str) -> None:
    job_id = service_stack.tenant("acme").submit("echo", b"x").job.job_id
    client = signed_in(console, READONLY_TOKEN)
    page = client.get(f"/jobs/{job_id}")
    assert page.status == 200 and "read-only" in page.body and "/cancel" not in page.body
    csrf = client.csrf_token("/queues")
    assert client.post(f"/jobs/{job_id}/cancel", {"reason": "r", "csrf_token": csrf}).status == 403


def test_what_tenants_wrote_is_rendered_inert(service_stack: ServiceStack, console: str) -> None:
    acme = service_stack.tenant("acme")
    job_id = acme.submit(
        "echo", XSS.encode(), labels={"note": XSS}, resource_key=XSS, resource_version=1, idempotency_key=XSS
    ).job.job_id
    client = signed_in(console)
    searches = [urllib.parse.urlencode(q) for q in ({"label": f"note={XSS}"}, {"kind": XSS}, {"error": XSS})]
    for path in (f"/jobs/{job_id}", *(f"/jobs?{q}" for q in searches)):
        body = client.get(path).body
        assert "<script>alert" not in body and "<img src=x" not in body, path
    assert "&lt;script&gt;alert(&#34;xss&#34;)&lt;/script&gt;" in client.get(f"/jobs/{job_id}").body


def test_an_operator_sees_every_tenant_and_a_tenant_still_only_its_own(
    service_stack: ServiceStack, console: str
) -> None:
    acme_job = service_stack.tenant("acme").submit("echo", b"a").job.job_id
    globex_job = service_stack.tenant("globex").submit("echo", b"g").job.job_id
    client = signed_in(console)
    listing = client.get("/jobs").body
    assert acme_job[-8:] in listing and globex_job[-8:] in listing
    only_globex = client.get("/jobs?tenant=globex").body
    assert globex_job[-8:] in only_globex and acme_job[-8:] not in only_globex
    with pytest.raises(grpc.RpcError) as refused:
        service_stack.tenant("acme").get(globex_job)
    assert refused.value.code() is grpc.StatusCode.NOT_FOUND
    queues = client.get("/queues").body
    assert ">acme<" in queues and ">globex<" in queues


def test_a_job_page_is_told_to_refresh_only_when_its_job_changed(service_stack: ServiceStack, console: str) -> None:
    job = service_stack.tenant("acme").submit("echo", b"x").job
    client = signed_in(console)
    unchanged = client.get(f"/jobs/{job.job_id}/live?version={job.sequence}-0", HX_Request="true")
    assert unchanged.status == 204 and not unchanged.header("HX-Refresh")
    csrf = client.csrf_token(f"/jobs/{job.job_id}")
    assert client.post(f"/jobs/{job.job_id}/cancel", {"reason": "stop", "csrf_token": csrf}).status == 303
    changed = client.get(f"/jobs/{job.job_id}/live?version={job.sequence}-0", HX_Request="true")
    assert changed.header("HX-Refresh") == "true"


def test_bulk_cancel_is_a_dry_run_until_its_count_is_confirmed(service_stack: ServiceStack, console: str) -> None:
    acme = service_stack.tenant("acme")
    ids = [acme.submit("echo", b"x", labels={"wave": "3"}).job.job_id for _ in range(3)]
    client = signed_in(console)
    csrf = client.csrf_token("/jobs")
    form = {"action": "cancel", "reason": "wave 3 is wrong", "filter": "label=wave%3D3", "csrf_token": csrf}
    dry_run = client.post("/jobs/bulk", form)
    assert dry_run.status == 200 and "3 jobs would be cancelled" in dry_run.body
    assert all(acme.get(i).state == jobs_pb2.JOB_STATE_PENDING for i in ids)
    assert client.post("/jobs/bulk", {**form, "expected_count": "3", "csrf_token": "stale"}).status == 403
    assert client.post("/jobs/bulk", {**form, "expected_count": "3"}).status == 303
    assert all(acme.get(i).state == jobs_pb2.JOB_STATE_CANCELLED for i in ids)
    assert "admin:ops" in client.get(f"/jobs/{ids[0]}").body


def test_kinds_pause_and_limits_go_through_the_admin_use_cases(service_stack: ServiceStack, console: str) -> None:
    client = signed_in(console)
    csrf = client.csrf_token("/kinds")
    assert client.post("/kinds/pause", {"kind": "echo", "reason": "provider down", "csrf_token": csrf}).status == 303
    kinds = client.get("/kinds").body
    assert "paused" in kinds and "provider down" in kinds and "admin:ops" in kinds
    service_stack.tenant("acme").submit("echo", b"x")
    assert "paused" in client.get("/queues").body
    limit = {"key": "kind:echo", "max_running": "2", "rate_per_second": "0.5", "burst": "3", "reason": "quota"}
    assert client.post("/limits/set", {**limit, "csrf_token": csrf}).status == 303
    limits = client.get("/limits").body
    assert "kind:echo" in limits and "0.5" in limits
    for bad in ({"max_running": "nan"}, {"max_running": "2.5"}, {"burst": "1e400", "max_running": "1"}):
        refused = client.post("/limits/set", {"key": "kind:x", "reason": "r", "csrf_token": csrf, **bad})
        assert refused.status == 400, bad
    alone = {"key": "kind:y", "max_running": "2", "rate_per_second": "", "burst": "", "reason": "r"}
    assert client.post("/limits/set", {**alone, "csrf_token": csrf}).status == 303
    weight = {"tenant": "globex", "weight": "4", "reason": "paying more"}
    assert client.post("/tenants/weight", {**weight, "csrf_token": csrf}).status == 303
    assert '>globex</a></td><td class="num">4<' in client.get("/limits").body
    readonly = signed_in(console, READONLY_TOKEN)
    ro_csrf = readonly.csrf_token("/kinds")
    assert readonly.post("/kinds/resume", {"kind": "echo", "reason": "r", "csrf_token": ro_csrf}).status == 403
    assert readonly.post("/limits/delete", {"key": "kind:echo", "reason": "r", "csrf_token": ro_csrf}).status == 403
    assert 'action="/kinds/' not in readonly.get("/kinds").body


def test_a_job_page_shows_its_stage_checkpoints_and_progress(
    service_stack: ServiceStack, console: str, tmp_path: Path
) -> None:
    service_stack.start_worker("w1", JOBS_HANDLER_MODULES="tests.handlers_for_tests")
    acme = service_stack.tenant("acme")
    payload = json.dumps({"dir": str(tmp_path), "fail_after": 2}).encode()
    job_id = acme.submit("staged.async", payload).job.job_id
    wait_until(lambda: acme.get(job_id).state == jobs_pb2.JOB_STATE_SUCCEEDED, timeout=60, what="the staged job")
    page = signed_in(console).get(f"/jobs/{job_id}").body
    assert "Stage checkpoints" in page
    assert all(stage in page for stage in ("upload_check", "extract_text", "embed", "publish_index"))
    assert '<progress max="1" value="1.0">' in page and "100 %" in page


def test_a_job_page_pages_its_dependents_and_says_why_a_pending_job_waits(
    service_stack: ServiceStack, console: str
) -> None:
    """A job that thousands of jobs wait for shows them a page at a time (20,000 of them made a 4.7 MB
    page); a due pending job says why it is not started."""
    acme = service_stack.tenant("acme")
    parent = acme.submit("echo", b"source").job.job_id
    dependents = 250
    acme.submit_many([jobs_pb2.SubmitJobRequest(kind="echo", depends_on=[parent]) for _ in range(dependents)])
    client = signed_in(console)

    pages: list[int] = []
    path = f"/jobs/{parent}"
    for _ in range(dependents):
        body = client.get(path).body
        pages.append(sum(1 for line in body.splitlines() if "<td>needed by</td>" in line))
        more = re.search(r'href="(/jobs/[0-9a-f-]+\?dependents_after=[0-9a-f-]+)">More dependents', body)
        if more is None:
            break
        path = more[1]
    assert pages == [100, 100, 50]

    client.post("/kinds/pause", {"kind": "echo", "reason": "provider down", "csrf_token": client.csrf_token("/kinds")})
    waiting = client.get(f"/jobs/{parent}").body
    assert "Waits because" in waiting and "its kind is paused by an operator (kind:echo) [kind_paused]" in waiting


def test_a_parents_page_pages_the_jobs_it_spawned_and_each_child_links_back(
    service_stack: ServiceStack, console: str
) -> None:
    service_stack.start_worker("w1", JOBS_HANDLER_MODULES="tests.handlers_for_tests")
    acme = service_stack.tenant("acme")
    parent = acme.submit("fanout.async", json.dumps({"pages": 150, "fan_in": False}).encode()).job.job_id
    wait_until(lambda: acme.get(parent).state == jobs_pb2.JOB_STATE_SUCCEEDED, timeout=60, what="the parent")
    client = signed_in(console)

    pages: list[int] = []
    path = f"/jobs/{parent}"
    for _ in range(10):
        body = client.get(path).body
        pages.append(len(re.findall(r"<td>plain\.echo</td>", body)))
        more = re.search(r'href="(/jobs/[0-9a-f-]+\?children_after=[0-9a-f-]+)">More spawned jobs', body)
        if more is None:
            break
        path = more[1]
    assert pages == [100, 50]

    child = json.loads(acme.result(parent).payload)["pages"][0]
    assert f'<a href="/jobs/{parent}">' in client.get(f"/jobs/{child}").body
