"""jobs.v1.AdminService through the API (in this process): role walls both ways, each RPC, bad input naming
its field, cross-tenant search, and bulk actions whose dry run count is the real count, each change
recorded with who and why."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from typing import Any

import grpc
import psycopg
import pytest
from google.protobuf import timestamp_pb2

from jobs.v1 import admin_pb2, jobs_pb2, worker_pb2
from shared.rpc_error_details import rpc_error_details
from tests.process_fixtures import READONLY_TOKEN, AdminClient, ServiceStack, TenantClient, wait_until

pytestmark = pytest.mark.timeout(180)

A = admin_pb2


def _refusal(call: Callable[[], Any]) -> tuple[grpc.StatusCode, str, list[str]]:
    with pytest.raises(grpc.RpcError) as raised:
        call()
    details = rpc_error_details(raised.value)
    fields = [field for field, _ in details.field_violations] if details else []
    return raised.value.code(), details.reason if details else "", fields


def _call(admin: AdminClient, method: str, request: Any) -> Any:
    return getattr(admin.stub, method)(request, metadata=admin.metadata, timeout=30)


def _actions(database_url: str) -> list[dict[str, Any]]:
    with psycopg.connect(database_url) as conn:
        cur = conn.execute("SELECT actor, action, target, reason, details FROM admin_actions ORDER BY action_id")
        names = [c.name for c in cur.description or ()]
        return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]


@pytest.fixture
def stack(service_stack: ServiceStack) -> ServiceStack:
    service_stack.start_api()
    return service_stack


def test_only_operators_reach_admin_service_and_operators_reach_nothing_else(stack: ServiceStack) -> None:
    acme = stack.tenant("acme")
    admin_stub = stack.admin().stub
    worker_stub, worker_md = stack.worker_stub()
    for metadata in (acme.metadata, worker_md):
        as_other = functools.partial(admin_stub.ListLimits, A.ListLimitsRequest(), metadata=metadata, timeout=10)
        assert _refusal(as_other)[0] is grpc.StatusCode.PERMISSION_DENIED
    assert (
        _refusal(lambda: admin_stub.ListLimits(A.ListLimitsRequest(), timeout=10))[0] is grpc.StatusCode.UNAUTHENTICATED
    )
    for token in ("test-admin-token", READONLY_TOKEN):
        operator = stack.admin(token)
        md = operator.metadata
        as_tenant = functools.partial(acme.stub.ListJobs, jobs_pb2.ListJobsRequest(), metadata=md, timeout=10)
        assert _refusal(as_tenant)[0] is grpc.StatusCode.PERMISSION_DENIED
        as_worker = functools.partial(worker_stub.Heartbeat, worker_pb2.HeartbeatRequest(), metadata=md, timeout=10)
        assert _refusal(as_worker)[0] is grpc.StatusCode.PERMISSION_DENIED
        assert _call(operator, "ListLimits", A.ListLimitsRequest()) is not None
    readonly = stack.admin(READONLY_TOKEN)
    set_limit = A.SetLimitRequest(key="kind:echo", max_running=1, burst=1, reason="try")
    assert _refusal(lambda: _call(readonly, "SetLimit", set_limit))[0] is grpc.StatusCode.PERMISSION_DENIED
    assert _call(readonly, "ListLimits", A.ListLimitsRequest()).limits == []


def test_limits_and_weights_are_set_listed_deleted_and_recorded_with_who_and_why(
    stack: ServiceStack, database_url: str
) -> None:
    admin = stack.admin()
    set_request = A.SetLimitRequest(
        key="provider:openai", max_running=4, rate_per_second=2.5, burst=5, reason="quota is 150 rpm"
    )
    limit = _call(admin, "SetLimit", set_request).limit
    assert (limit.key, limit.max_running, limit.rate_per_second, limit.burst) == ("provider:openai", 4, 2.5, 5)
    assert limit.updated_by == "admin:ops"
    # Unset fields mean their defaults: max_running alone is a whole request, its bucket one.
    alone = _call(admin, "SetLimit", A.SetLimitRequest(key="kind:echo", max_running=10, reason="smoke only")).limit
    assert (alone.max_running, alone.rate_per_second, alone.burst) == (10, 0.0, 1)
    listed = _call(admin, "ListLimits", A.ListLimitsRequest()).limits
    assert [x.key for x in listed] == ["kind:echo", "provider:openai"]
    assert _call(admin, "DeleteLimit", A.DeleteLimitRequest(key="kind:echo", reason="done")).deleted
    assert not _call(admin, "DeleteLimit", A.DeleteLimitRequest(key="kind:echo", reason="again")).deleted
    assert [x.key for x in _call(admin, "ListLimits", A.ListLimitsRequest()).limits] == ["provider:openai"]

    weight = _call(admin, "SetTenantWeight", A.SetTenantWeightRequest(tenant="acme", weight=3, reason="paid tier"))
    assert (weight.tenant_weight.tenant, weight.tenant_weight.weight) == ("acme", 3)
    weights = _call(admin, "ListTenantWeights", A.ListTenantWeightsRequest()).tenant_weights
    assert [(w.tenant, w.weight, w.updated_by) for w in weights] == [("acme", 3, "admin:ops")]

    actions = [(a["actor"], a["action"], a["target"], a["reason"]) for a in _actions(database_url)]
    assert actions == [
        ("admin:ops", "set_limit", "provider:openai", "quota is 150 rpm"),
        ("admin:ops", "set_limit", "kind:echo", "smoke only"),
        ("admin:ops", "delete_limit", "kind:echo", "done"),
        ("admin:ops", "delete_limit", "kind:echo", "again"),
        ("admin:ops", "set_tenant_weight", "acme", "paid tier"),
    ]


@pytest.mark.parametrize(
    ("method", "request_message", "field"),
    [
        ("SetLimit", A.SetLimitRequest(key="k", max_running=-1, burst=1, reason="r"), "max_running"),
        ("SetLimit", A.SetLimitRequest(key="k", max_running=1, burst=-1, reason="r"), "burst"),
        ("SetLimit", A.SetLimitRequest(key="k", rate_per_second=1e308, reason="r"), "rate_per_second"),
        ("SetLimit", A.SetLimitRequest(key="k", rate_per_second=5e-324, reason="r"), "rate_per_second"),
        ("SetLimit", A.SetLimitRequest(key="k", rate_per_second=float("inf"), burst=1, reason="r"), "rate_per_second"),
        ("SetLimit", A.SetLimitRequest(key="k", rate_per_second=float("nan"), burst=1, reason="r"), "rate_per_second"),
        ("SetLimit", A.SetLimitRequest(key="k", rate_per_second=-1, burst=1, reason="r"), "rate_per_second"),
        ("SetLimit", A.SetLimitRequest(key="", max_running=1, burst=1, reason="r"), "key"),
        ("SetLimit", A.SetLimitRequest(key="k", burst=1, reason="r"), "max_running"),
        ("SetTenantWeight", A.SetTenantWeightRequest(tenant="acme", weight=0, reason="r"), "weight"),
        ("SetTenantWeight", A.SetTenantWeightRequest(tenant="", weight=2, reason="r"), "tenant"),
        ("PauseKind", A.PauseKindRequest(kind="no.such.kind", reason="r"), "kind"),
        ("ResumeKind", A.ResumeKindRequest(kind="no.such.kind", reason="r"), "kind"),
        ("CancelJobs", A.CancelJobsRequest(reason="r"), "expected_count"),
        ("CancelJobs", A.CancelJobsRequest(dry_run=True), "reason"),
        ("RetryJobs", A.RetryJobsRequest(dry_run=True), "reason"),
        ("RetryJobs", A.RetryJobsRequest(reason="r", expected_count=-1), "expected_count"),
        ("SearchJobs", A.SearchJobsRequest(page_size=501), "page_size"),
    ],
)
def test_bad_input_is_invalid_argument_naming_the_field_and_changes_nothing(
    stack: ServiceStack, database_url: str, method: str, request_message: Any, field: str
) -> None:
    code, _, fields = _refusal(lambda: _call(stack.admin(), method, request_message))
    assert code is grpc.StatusCode.INVALID_ARGUMENT
    assert field in fields
    assert _actions(database_url) == []


def test_kinds_are_listed_paused_resumed_and_retired(stack: ServiceStack, database_url: str) -> None:
    admin = stack.admin()
    kinds = wait_until(
        lambda: {k.kind: k for k in _call(admin, "ListKinds", A.ListKindsRequest()).kinds} or None,
        timeout=30,
        what="the built-in kinds to be published",
    )
    assert {"echo", "sleep", "flaky", "summarize"} <= set(kinds)
    assert not kinds["echo"].paused and kinds["echo"].max_attempts >= 1

    paused = _call(admin, "PauseKind", A.PauseKindRequest(kind="echo", reason="provider outage")).kind
    assert (paused.paused, paused.paused_by, paused.pause_reason) == (True, "admin:ops", "provider outage")
    again = _call(admin, "PauseKind", A.PauseKindRequest(kind="echo", reason="second pause")).kind
    assert again.pause_reason == "provider outage"  # the first pause stands
    with psycopg.connect(database_url) as conn:
        assert conn.execute("SELECT paused_by FROM kind_pauses WHERE kind = 'echo'").fetchone() == ("admin:ops",)
    # Submissions of a paused kind are still accepted.
    assert stack.tenant("acme").submit("echo", b"x").job.state == jobs_pb2.JOB_STATE_PENDING

    resumed = _call(admin, "ResumeKind", A.ResumeKindRequest(kind="echo", reason="outage over")).kind
    assert not resumed.paused and resumed.paused_by == ""

    _call(admin, "RetireKind", A.RetireKindRequest(kind="summarize", reason="unused"))
    listed = {k.kind: k for k in _call(admin, "ListKinds", A.ListKindsRequest()).kinds}
    assert "summarize" not in listed
    retired = {k.kind: k for k in _call(admin, "ListKinds", A.ListKindsRequest(include_retired=True)).kinds}
    assert retired["summarize"].HasField("retired_at")
    code, _, fields = _refusal(lambda: _call(admin, "RetireKind", A.RetireKindRequest(kind="summarize", reason="x")))
    assert (code, fields) == (grpc.StatusCode.INVALID_ARGUMENT, ["kind"])
    actions = [(a["action"], a["target"], a["reason"]) for a in _actions(database_url)]
    assert actions == [
        ("pause_kind", "echo", "provider outage"),
        ("pause_kind", "echo", "second pause"),
        ("resume_kind", "echo", "outage over"),
        ("retire_kind", "summarize", "unused"),
    ]


def _submit_labelled(client: TenantClient, count: int, **labels: str) -> list[str]:
    requests = [jobs_pb2.SubmitJobRequest(kind="echo", payload=b"x", labels=labels) for _ in range(count)]
    return [r.job.job_id for r in client.submit_many(requests).results]


def test_search_crosses_tenants_pages_in_a_stable_order_and_filters(stack: ServiceStack) -> None:
    admin = stack.admin()
    acme_ids = _submit_labelled(stack.tenant("acme"), 5, batch="import-7")
    globex_ids = _submit_labelled(stack.tenant("globex"), 4, batch="import-7")
    other = _submit_labelled(stack.tenant("globex"), 2, batch="other")

    seen: list[tuple[str, str]] = []
    token = ""
    while True:
        page = _call(admin, "SearchJobs", A.SearchJobsRequest(page_size=3, page_token=token))
        seen += [(j.tenant, j.job.job_id) for j in page.jobs]
        token = page.next_page_token
        if not token:
            break
    assert len(seen) == len(set(seen)) == 11
    assert {job_id for _, job_id in seen} == set(acme_ids + globex_ids + other)
    assert {t for t, job_id in seen if job_id in acme_ids} == {"acme"}

    def search(**fields: Any) -> list[str]:
        found = _call(admin, "SearchJobs", A.SearchJobsRequest(filter=A.JobFilter(**fields), page_size=500)).jobs
        return sorted(j.job.job_id for j in found)

    assert search(tenant="acme") == sorted(acme_ids)
    assert search(labels={"batch": "import-7"}) == sorted(acme_ids + globex_ids)
    assert search(tenant="globex", labels={"batch": "import-7"}) == sorted(globex_ids)
    assert search(kind="sleep") == []
    assert search(states=[jobs_pb2.JOB_STATE_PENDING], tenant="globex") == sorted(globex_ids + other)
    assert search(states=[jobs_pb2.JOB_STATE_FAILED]) == []
    future = timestamp_pb2.Timestamp(seconds=4102444800)  # 2100-01-01
    assert search(created_after=future) == []
    assert len(search(created_before=future)) == 11


def test_any_tenants_job_and_history_are_readable_and_a_missing_one_is_not_found(stack: ServiceStack) -> None:
    admin = stack.admin()
    job_id = stack.tenant("globex").submit("echo", b"x").job.job_id
    got = _call(admin, "GetJob", A.AdminServiceGetJobRequest(job_id=job_id)).job
    assert (got.tenant, got.job.job_id) == ("globex", job_id)
    events = _call(admin, "ListJobEvents", A.AdminServiceListJobEventsRequest(job_id=job_id)).events
    assert [e.to_state for e in events] == [jobs_pb2.JOB_STATE_PENDING]
    missing = "00000000-0000-4000-8000-000000000000"
    code, _, _ = _refusal(lambda: _call(admin, "GetJob", A.AdminServiceGetJobRequest(job_id=missing)))
    assert code is grpc.StatusCode.NOT_FOUND


def test_bulk_cancel_touches_exactly_the_dry_runs_count_and_records_who_and_why(
    stack: ServiceStack, database_url: str
) -> None:
    admin, acme = stack.admin(), stack.tenant("acme")
    targets = _submit_labelled(acme, 30, batch="bad-import") + _submit_labelled(
        stack.tenant("globex"), 20, batch="bad-import"
    )
    bystanders = _submit_labelled(acme, 5, batch="good")
    already = targets.pop()
    acme_or_globex = acme if already in targets[:30] else stack.tenant("globex")
    acme_or_globex.stub.CancelJob(
        jobs_pb2.CancelJobRequest(job_id=already), metadata=acme_or_globex.metadata, timeout=10
    )
    bulk_filter = A.JobFilter(labels={"batch": "bad-import"})

    dry = _call(admin, "CancelJobs", A.CancelJobsRequest(filter=bulk_filter, reason="bad import", dry_run=True))
    assert (dry.matched_count, dry.changed_count, dry.dry_run) == (49, 0, True)
    assert all(acme.get(j).state == jobs_pb2.JOB_STATE_PENDING for j in targets[:30])

    too_few = A.CancelJobsRequest(filter=bulk_filter, reason="bad import", expected_count=48)
    code, reason, _ = _refusal(lambda: _call(admin, "CancelJobs", too_few))
    assert (code, reason) == (grpc.StatusCode.FAILED_PRECONDITION, "COUNT_EXCEEDED")
    assert all(acme.get(j).state == jobs_pb2.JOB_STATE_PENDING for j in targets[:30])

    done = _call(admin, "CancelJobs", A.CancelJobsRequest(filter=bulk_filter, reason="bad import", expected_count=49))
    assert (done.matched_count, done.changed_count, done.skipped_count) == (dry.matched_count, 49, 0)
    found = _call(admin, "SearchJobs", A.SearchJobsRequest(filter=bulk_filter, page_size=500)).jobs
    assert {j.job.state for j in found} == {jobs_pb2.JOB_STATE_CANCELLED}
    assert all(acme.get(j).state == jobs_pb2.JOB_STATE_PENDING for j in bystanders)
    history = _call(admin, "ListJobEvents", A.AdminServiceListJobEventsRequest(job_id=targets[-1])).events
    assert (history[-1].actor, history[-1].reason) == ("admin:ops", "cancelled: bad import")
    (action,) = [a for a in _actions(database_url) if a["action"] == "cancel_jobs"]
    assert (action["actor"], action["reason"], action["details"]["matched"]) == ("admin:ops", "bad import", 49)
    assert action["details"]["filter"] == {"labels": {"batch": "bad-import"}}
    again = _call(admin, "CancelJobs", A.CancelJobsRequest(filter=bulk_filter, reason="again", dry_run=True))
    assert again.matched_count == 0


def test_bulk_retry_needs_consent_for_unknown_outcomes_as_retry_job_does(stack: ServiceStack) -> None:
    stack.start_worker("w1")
    admin, acme = stack.admin(), stack.tenant("acme")
    unknown = [
        acme.submit(
            "flaky", json.dumps({"fail_times": 5, "category": "unknown"}).encode(), labels={"b": "1"}
        ).job.job_id
        for _ in range(3)
    ]
    failed = [
        acme.submit(
            "flaky", json.dumps({"fail_times": 5, "category": "permanent"}).encode(), labels={"b": "1"}
        ).job.job_id
        for _ in range(2)
    ]
    wait_until(
        lambda: (
            all(acme.get(j).state == jobs_pb2.JOB_STATE_OUTCOME_UNKNOWN for j in unknown)
            and all(acme.get(j).state == jobs_pb2.JOB_STATE_FAILED for j in failed)
        ),
        timeout=60,
        what="the jobs to settle",
    )
    assert _call(admin, "SearchJobs", A.SearchJobsRequest(filter=A.JobFilter(error_text="FAIL"))).jobs
    bulk_filter = A.JobFilter(tenant="acme", labels={"b": "1"})
    dry = _call(admin, "RetryJobs", A.RetryJobsRequest(filter=bulk_filter, reason="provider fixed", dry_run=True))
    assert dry.matched_count == 5
    stack.processes[-1].stop()  # so that reopened jobs stay as the retry left them

    without = _call(
        admin, "RetryJobs", A.RetryJobsRequest(filter=bulk_filter, reason="provider fixed", expected_count=5)
    )
    assert (without.changed_count, without.skipped_count) == (2, 3)
    assert {s.reason for s in without.skipped} == {"DUPLICATE_RISK_NOT_ACCEPTED"}
    assert {s.job_id for s in without.skipped} == set(unknown)

    consent = A.RetryJobsRequest(filter=bulk_filter, reason="checked", expected_count=3, accept_duplicate_risk=True)
    with_consent = _call(admin, "RetryJobs", consent)
    assert (with_consent.matched_count, with_consent.changed_count) == (3, 3)
    history = _call(admin, "ListJobEvents", A.AdminServiceListJobEventsRequest(job_id=unknown[0])).events
    assert history[-1].actor == "admin:ops"
    assert history[-1].reason == "manual retry by admin:ops: checked (duplicate risk accepted)"
