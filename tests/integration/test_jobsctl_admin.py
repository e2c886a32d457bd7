"""`jobsctl limits|kinds|tenants|admin` against the API (in this process), with an operator's token: what an
operator types and sees, and the refusals a tenant's token or bad input get."""

from __future__ import annotations

import json

import pytest

from jobs.v1 import jobs_pb2
from tests.jobsctl_process import CliRun, jobsctl
from tests.process_fixtures import ADMIN_TOKEN, ServiceStack

pytestmark = pytest.mark.timeout(180)


@pytest.fixture
def api(service_stack: ServiceStack) -> str:
    service_stack.start_api()
    return service_stack.api_target


def ops(api: str, *args: str) -> CliRun:
    return jobsctl(api, *args, token=ADMIN_TOKEN)


def test_limits_set_list_delete_transcript(api: str) -> None:
    run = ops(
        api,
        "limits",
        "set",
        "provider:openai",
        "--max-running",
        "4",
        "--rate",
        "2.5",
        "--burst",
        "5",
        "--reason",
        "quota is 150 rpm",
    )
    assert (run.code, run.text) == (0, "provider:openai max_running=4 rate=2.5/s burst=5\n"), run.stderr
    listed = ops(api, "limits", "list")
    header, row = listed.text.splitlines()
    assert header.split() == ["KEY", "MAX_RUNNING", "RATE_PER_SECOND", "BURST", "UPDATED_BY", "UPDATED_AT"]
    assert row.split()[:5] == ["provider:openai", "4", "2.5", "5", "admin:ops"]
    as_json = json.loads(ops(api, "limits", "list", "-o", "json").text)
    assert as_json["limits"][0]["key"] == "provider:openai"
    deleted = ops(api, "limits", "delete", "provider:openai", "--reason", "quota lifted")
    assert (deleted.code, deleted.text) == (0, "provider:openai deleted\n")
    assert ops(api, "limits", "list").text.splitlines()[1:] == []


def test_bad_limits_and_tenant_tokens_are_refused_with_the_field_or_the_role(api: str) -> None:
    negative = ops(api, "limits", "set", "k", "--max-running", "-1", "--reason", "r")
    assert negative.code == 2 and "max_running" in negative.stderr
    burst = ops(api, "limits", "set", "k", "--rate", "1", "--burst", "-1", "--reason", "r")
    assert burst.code == 2 and "burst" in burst.stderr
    flood = ops(api, "limits", "set", "k", "--rate", "1e308", "--reason", "r")
    assert flood.code == 2 and "rate_per_second" in flood.stderr
    no_reason = ops(api, "admin", "cancel", "--label", "batch=none", "--dry-run")
    assert no_reason.code == 2 and "--reason" in no_reason.stderr
    as_tenant = jobsctl(api, "limits", "list")
    assert as_tenant.code != 0 and "PERMISSION_DENIED" in as_tenant.stderr
    unknown = ops(api, "kinds", "pause", "no.such.kind", "--reason", "r")
    assert unknown.code == 2 and "kind" in unknown.stderr


def test_the_contracts_forms_work_as_written_and_record_who(api: str) -> None:
    """A reason is optional for settings (it is recorded when given); bulk job changes require one."""
    limit = ops(api, "limits", "set", "provider:x", "--max-running", "2", "--rate", "1", "--burst", "3")
    assert (limit.code, limit.text) == (0, "provider:x max_running=2 rate=1/s burst=3\n"), limit.stderr
    paused = ops(api, "kinds", "pause", "echo")
    assert paused.code == 0 and paused.text.startswith("echo paused by admin:ops"), paused.stderr
    listed = ops(api, "limits", "list").text.splitlines()
    assert listed[1].split()[:5] == ["provider:x", "2", "1", "3", "admin:ops"]


def test_kinds_and_tenant_weights_transcript(api: str) -> None:
    listed = ops(api, "kinds", "list")
    assert listed.code == 0, listed.stderr
    assert listed.text.splitlines()[0].split() == [
        "KIND",
        "PAUSED",
        "MAX_ATTEMPTS",
        "LIMIT_KEYS",
        "PUBLISHERS",
        "CONFLICT",
    ]
    assert any(line.split()[:2] == ["echo", "no"] for line in listed.text.splitlines())
    paused = ops(api, "kinds", "pause", "echo", "--reason", "provider outage")
    assert (paused.code, paused.text) == (0, "echo paused by admin:ops: provider outage\n"), paused.stderr
    assert any(
        line.split()[:3] == ["echo", "yes", "(admin:ops)"] for line in ops(api, "kinds", "list").text.splitlines()
    )
    resumed = ops(api, "kinds", "resume", "echo", "--reason", "outage over")
    assert (resumed.code, resumed.text) == (0, "echo running\n")

    weight = ops(api, "tenants", "weight", "acme", "3", "--reason", "paid tier")
    assert (weight.code, weight.text) == (0, "acme weight 3\n"), weight.stderr
    weights = ops(api, "tenants", "weights").text.splitlines()
    assert weights[1].split()[:3] == ["acme", "3", "admin:ops"]


def test_admin_search_and_bulk_cancel_with_a_dry_run_transcript(service_stack: ServiceStack, api: str) -> None:
    acme, globex = service_stack.tenant("acme"), service_stack.tenant("globex")
    for client, count in ((acme, 3), (globex, 2)):
        client.submit_many([jobs_pb2.SubmitJobRequest(kind="echo", labels={"batch": "bad"}) for _ in range(count)])
    acme.submit("echo", b"keep", labels={"batch": "good"})

    search = ops(api, "admin", "search", "--label", "batch=bad")
    rows = search.text.splitlines()
    assert rows[0].split() == ["TENANT", "JOB_ID", "KIND", "STATE", "ATTEMPTS", "CREATED_AT"]
    assert sorted(r.split()[0] for r in rows[1:]) == ["acme", "acme", "acme", "globex", "globex"]
    only_globex = ops(api, "admin", "search", "--tenant", "globex", "--created-after", "1h").text.splitlines()
    assert [r.split()[0] for r in only_globex[1:]] == ["globex", "globex"]

    dry = ops(api, "admin", "cancel", "--label", "batch=bad", "--reason", "bad import", "--dry-run")
    assert (dry.code, dry.text) == (
        0,
        "5 jobs match; to cancel them run again with --expected-count 5 instead of --dry-run\n",
    ), dry.stderr
    short = ops(api, "admin", "cancel", "--label", "batch=bad", "--reason", "bad import", "--expected-count", "4")
    assert short.code == 4 and "COUNT_EXCEEDED" in short.stderr
    done = ops(api, "admin", "cancel", "--label", "batch=bad", "--reason", "bad import", "--expected-count", "5")
    assert (done.code, done.text) == (0, "5 of 5 jobs cancelled; 0 skipped\n"), done.stderr
    job_id = rows[1].split()[1]
    events = ops(api, "admin", "events", job_id)
    assert "admin:ops" in events.text and "cancelled: bad import" in events.text
    got = ops(api, "admin", "get", job_id)
    assert "CANCELLED" in got.text
    retry = ops(api, "admin", "retry", "--label", "batch=bad", "--reason", "try again", "--dry-run")
    assert retry.text.startswith("5 jobs match; to retry them")
