"""The job lifecycle as a state machine, driven through the real use-cases against a real database.

Hypothesis picks sequences of submissions, claims, reports, cancels, retries, expired leases, passed
deadlines and newer versions; a plain-Python model predicts every job's state, and after every step the
database must agree with the model and with the invariants of the contract (legal transitions only, at
most one result and only from the lease that completed, fencing tokens and sequences that only rise,
the running jobs tallied per key equal to a count of the running rows).
Each example runs on its own fresh database and its own event loop: hypothesis drives the rules
synchronously, so the async use-cases run to completion inside each rule. The model, its rules and its
invariants are one specification and stay in one module, longer than most, to be read together.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)
from psycopg.rows import dict_row

from api_service.usecases.job_queries import JobQueries
from api_service.usecases.lifecycle import JobLifecycle
from api_service.usecases.submission import SubmissionService
from api_service.usecases.worker_reports import WorkerReports
from shared.domain.errors import (
    AlreadyExists,
    FailedPrecondition,
    InvalidArgument,
    JobCancelled,
    JobsError,
    JobSuperseded,
    LeaseLost,
    NotFound,
)
from shared.domain.ids import FencingToken, JobId, TenantId
from shared.domain.jobs import (
    TERMINAL_STATES,
    Completion,
    ErrorCategory,
    JobError,
    JobState,
    LeaseRef,
    NewJob,
    ReportOutcome,
)
from shared.domain.submission_rules import SubmissionLimits
from shared.handlers.builtin import echo
from shared.handlers.loader import load_registry
from shared.storage import lease_store
from shared.storage.database import Database, PoolSettings
from tests import factories
from tests.db_fixtures import SyncProbe, TestDatabases

# Two cores run 25 examples of 30 steps in well under this; the bound catches a hang, not slowness.
pytestmark = pytest.mark.timeout(120)

# A kind without backoff: a failed attempt is claimable again at once, so the model needs no clock.
KIND = "lifecycle-model"
KIND_MAX_ATTEMPTS = 2
TENANT = TenantId("tenant-a")
OTHER_TENANT = TenantId("tenant-b")
ACTOR = f"tenant:{TENANT}"
WORKER = "worker-1"
LEASE_SECONDS = 30.0
SWEEP_LIMIT = 100
IDEMPOTENCY_KEYS = ("key-1", "key-2", "key-3")
RESOURCE_KEYS = ("doc-1", "doc-2")
PAYLOADS = (b"a", b"b")

P, B, R, W = JobState.PENDING, JobState.BLOCKED, JobState.RUNNING, JobState.RETRY_WAIT
S, F, C, X, U = JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED, JobState.SUPERSEDED, JobState.OUTCOME_UNKNOWN
# Every (from, to) pair a job_events row may show; None is the insert. running→running is a cancel request.
LEGAL_TRANSITIONS = frozenset(
    {(None, to) for to in (P, B, F, X)}
    | {(P, R), (W, R)}
    | {(R, to) for to in (R, S, W, F, C, U, P, X)}
    | {(frm, C) for frm in (P, B, W, U)}
    | {(frm, X) for frm in (P, B, W)}
    | {(frm, F) for frm in (P, B, W)}
    | {(B, P)}
    | {(frm, to) for frm in (F, C, U) for to in (P, B)}
)
ENDED_BADLY = frozenset({F, C, X})

SETTINGS = settings(
    max_examples=25,
    stateful_step_count=30,
    deadline=None,
    # No example database: the repository stays clean; a failure prints a blob that replays it
    # (@reproduce_failure on the test function).
    database=None,
    print_blob=True,
    # Every example costs a fresh database (~0.3 s to clone and drop), so shrinking a 30-step failure
    # runs for minutes, past the timeout, and the report would be lost. The unshrunk steps are printed
    # instead; add Phase.shrink here to shrink a replayed failure locally.
    phases=(Phase.explicit, Phase.generate),
    suppress_health_check=[HealthCheck.too_slow],
)


@dataclass
class ModelJob:
    """What the model expects of one job."""

    job_id: JobId
    state: JobState
    attempts: int
    max_attempts: int
    retry_budget: int
    fencing_token: int
    priority: int
    depends_on: tuple[JobId, ...]
    resource_key: str | None
    resource_version: int | None
    cancel_requested: bool = False
    deadline_passed: bool = False
    # (payload, attempt, fencing token) of the stored result.
    result: tuple[bytes, int, int] | None = None
    # The category of the last recorded error, and the attempt whose unknown outcome a retry accepted.
    last_category: ErrorCategory | None = None
    risk_accepted_attempt: int = -1

    @property
    def duplicate_risk(self) -> bool:
        """The latest attempt's outcome is unknown and no retry has accepted that yet (the model
        records no receipts, so only the error category tells)."""
        unknown = self.last_category is ErrorCategory.OUTCOME_UNKNOWN and self.attempts > self.risk_accepted_attempt
        return self.state is JobState.OUTCOME_UNKNOWN or unknown


class LifecycleMachine(RuleBasedStateMachine):
    """One tenant, one worker and the sweeps, on a database of their own; another tenant now and then."""

    def __init__(self, databases: TestDatabases) -> None:
        super().__init__()
        self.databases = databases
        self.url = databases.create_clone()
        self.loop = asyncio.new_event_loop()
        self.db = self.run(Database.open(PoolSettings(self.url, max_size=2, application_name="jobs-model"), wait=True))
        self.probe = SyncProbe(psycopg.connect(self.url, autocommit=True, row_factory=dict_row))
        registry = load_registry(())
        registry.register(KIND, max_attempts=KIND_MAX_ATTEMPTS, backoff_base_seconds=0, backoff_cap_seconds=0)(echo)
        self.submission = SubmissionService(
            self.db, self.run(factories.published_kinds(self.db, registry)), SubmissionLimits()
        )
        self.lifecycle = JobLifecycle(self.db)
        self.queries = JobQueries(self.db)
        self.reports = WorkerReports(self.db, _IgnoredRejections(), lease_max_seconds=3600)
        self.jobs: dict[JobId, ModelJob] = {}
        self.keys: dict[str, tuple[NewJob, JobId]] = {}
        self.heads: dict[str, int] = {}
        # Idempotency keys another tenant used as well.
        self.foreign_keys: set[str] = set()

    def teardown(self) -> None:
        try:
            self.run(self.db.close())
            self.loop.close()
            self.probe.conn.close()
        finally:
            self.databases.drop_url_later(self.url)

    def run(self, call: Coroutine[Any, Any, Any]) -> Any:
        return self.loop.run_until_complete(call)

    # The model's transitions.

    def move(self, jobs: list[ModelJob], state: JobState) -> None:
        """Moves jobs in one statement, then settles their dependents as the database trigger does."""
        changed = [job for job in jobs if job.state is not state]
        for job in jobs:
            job.state = state
        if state in TERMINAL_STATES:
            for job in changed:
                self.settle_dependents(job)

    def settle_dependents(self, ended: ModelJob) -> None:
        for job in self.jobs.values():
            if job.state is not B or ended.job_id not in job.depends_on:
                continue
            if ended.state is not S:
                job.last_category = ErrorCategory.PERMANENT
                self.move([job], F)
            elif all(self.jobs[dep].state is S for dep in job.depends_on):
                job.state = P

    def state_at_submission(self, new: NewJob) -> JobState:
        if new.resource_key and (new.resource_version or 0) < self.heads.get(new.resource_key, 0):
            return X
        deps = [self.jobs[dep].state for dep in new.depends_on]
        if any(state in ENDED_BADLY for state in deps):
            return F
        return P if all(state is S for state in deps) else B

    def after_failure(self, job: ModelJob, category: ErrorCategory) -> JobState:
        if job.cancel_requested:
            return C
        if category is ErrorCategory.OUTCOME_UNKNOWN:
            return U
        if category is ErrorCategory.PERMANENT or job.attempts >= job.max_attempts or job.deadline_passed:
            return F
        return W

    def runnable(self) -> list[ModelJob]:
        return [job for job in self.jobs.values() if job.state in (P, W) and not job.deadline_passed]

    def with_state(self, *states: JobState) -> list[ModelJob]:
        return [job for job in self.jobs.values() if job.state in states]

    # Helpers for rules.

    def refused(self, call: Coroutine[Any, Any, Any], expected: type[JobsError], reason: str | None = None) -> None:
        """The call raises exactly `expected` and leaves every row as it was."""
        before = self.probe.snapshot()
        with pytest.raises(JobsError) as caught:
            self.run(call)
        assert type(caught.value) is expected, f"expected {expected.__name__}, got {caught.value!r}"
        if reason is not None:
            assert caught.value.reason == reason
        assert self.probe.snapshot() == before

    def pick_job(self, data: st.DataObject, *preferred: JobState, one_in: int = 8) -> ModelJob:
        """A job in one of the preferred states, except one time in `one_in` a job in another state."""
        wanted = self.with_state(*preferred)
        others = [job for job in self.jobs.values() if job.state not in preferred]
        wander = bool(others) and (not wanted or data.draw(st.integers(1, one_in), label="another state") == 1)
        return data.draw(st.sampled_from(others if wander else wanted), label="job")

    def pick_lease(self, data: st.DataObject, job: ModelJob) -> LeaseRef:
        """The job's latest token, an older one or one never issued; only the latest of a running job holds."""
        # Mostly the latest (listed first, so that shrinking heads for reports that hold).
        offsets = (0, 0, -1, +1)
        tokens = [job.fencing_token + offset for offset in offsets if job.fencing_token + offset >= 1]
        return LeaseRef(job.job_id, FencingToken(data.draw(st.sampled_from(tokens), label="token")))

    def holds(self, job: ModelJob, lease: LeaseRef) -> bool:
        return job.state is R and lease.fencing_token == job.fencing_token

    def report_refused(self, call: Coroutine[Any, Any, Any], job: ModelJob) -> None:
        expected = {C: JobCancelled, X: JobSuperseded}.get(job.state, LeaseLost)
        self.refused(call, expected)

    # Rules.

    @initialize(data=st.data())
    def seed(self, data: st.DataObject) -> None:
        """A few jobs, some already running, so that every example has work whichever rules it draws."""
        for _ in range(data.draw(st.integers(2, 4), label="seed jobs")):
            self.submit_and_expect(self.draw_submission(data))
        if self.runnable():
            self.claim(data.draw(st.integers(1, 3), label="seed claims"))

    @rule(data=st.data())
    def submit(self, data: st.DataObject) -> None:
        """A new request, or now and then the very request an earlier submission made with its key."""
        if self.keys and data.draw(st.integers(0, 3), label="replay a used key") == 0:
            new, _ = self.keys[data.draw(st.sampled_from(sorted(self.keys)))]
        else:
            new = self.draw_submission(data)
        self.submit_and_expect(new)

    def draw_submission(self, data: st.DataObject) -> NewJob:
        """Sometimes with an idempotency key, a resource version or dependencies on existing jobs."""
        resource = data.draw(st.none() | st.tuples(st.sampled_from(RESOURCE_KEYS), st.integers(1, 4)))
        deps: list[JobId] = []
        if self.jobs and data.draw(st.booleans(), label="with dependencies") is True:
            deps = data.draw(st.lists(st.sampled_from(list(self.jobs)), min_size=1, max_size=2, unique=True))
        return NewJob(
            kind=KIND,
            payload=data.draw(st.sampled_from(PAYLOADS)),
            idempotency_key=data.draw(st.none() | st.sampled_from(IDEMPOTENCY_KEYS)),
            priority=data.draw(st.integers(-1, 1)),
            max_attempts=data.draw(st.integers(0, 3)),
            resource_key=resource[0] if resource else None,
            resource_version=resource[1] if resource else None,
            depends_on=tuple(deps),
        )

    @precondition(lambda self: self.heads)
    @rule(data=st.data())
    def supersede(self, data: st.DataObject) -> None:
        """A newer version of a key ends its older unfinished jobs, a running one included."""
        key = data.draw(st.sampled_from(sorted(self.heads)))
        if data.draw(st.booleans(), label="another tenant first"):
            self.other_tenant_submits(key)
        self.submit_and_expect(NewJob(kind=KIND, payload=b"v", resource_key=key, resource_version=self.heads[key] + 1))

    def other_tenant_submits(self, key: str) -> None:
        """Another tenant's far newer version of the same resource key, under an idempotency key this tenant
        used too, supersedes nothing and replays nothing of this tenant's."""
        unused = sorted(set(self.keys) - self.foreign_keys)
        idempotency_key = unused[0] if unused else None
        # Another kind than the one claimed here, so that the model's claims never meet it.
        new = NewJob(
            kind="echo",
            payload=b"foreign",
            idempotency_key=idempotency_key,
            resource_key=key,
            resource_version=self.heads[key] + 10,
        )
        before = self.tenant_snapshot()
        assert self.run(self.submission.submit(OTHER_TENANT, "tenant:tenant-b", new)).created
        assert self.tenant_snapshot() == before
        if idempotency_key is not None:
            self.foreign_keys.add(idempotency_key)

    def tenant_snapshot(self) -> dict[str, list[dict[str, Any]]]:
        snapshot = self.probe.snapshot()
        return {table: [row for row in rows if row["tenant"] == TENANT] for table, rows in snapshot.items()}

    def submit_and_expect(self, new: NewJob) -> None:
        if new.idempotency_key in self.keys:
            earlier, job_id = self.keys[new.idempotency_key]
            if earlier != new:
                self.refused(self.submission.submit(TENANT, ACTOR, new), AlreadyExists)
                return
            before = self.probe.snapshot()
            outcome = self.run(self.submission.submit(TENANT, ACTOR, new))
            assert (outcome.created, outcome.job.job_id) == (False, job_id)
            assert self.probe.snapshot() == before
            return
        expected = self.state_at_submission(new)
        outcome = self.run(self.submission.submit(TENANT, ACTOR, new))
        assert outcome.created and outcome.job.state is expected
        max_attempts = new.max_attempts or KIND_MAX_ATTEMPTS
        job = ModelJob(
            outcome.job.job_id,
            expected,
            0,
            max_attempts,
            max_attempts,
            0,
            new.priority,
            new.depends_on,
            new.resource_key,
            new.resource_version,
        )
        if expected is F:
            job.last_category = ErrorCategory.PERMANENT
        self.jobs[job.job_id] = job
        if new.idempotency_key is not None:
            self.keys[new.idempotency_key] = (new, job.job_id)
        if new.resource_key and (new.resource_version or 0) > self.heads.get(new.resource_key, 0):
            self.heads[new.resource_key] = new.resource_version or 0
            self.move(
                [
                    old
                    for old in self.with_state(P, B, W, R)
                    if old.resource_key == new.resource_key
                    and (old.resource_version or 0) < (job.resource_version or 0)
                ],
                X,
            )

    @precondition(lambda self: self.runnable())
    @rule(limit=st.integers(1, 3))
    def claim(self, limit: int) -> None:
        runnable = self.runnable()
        claimed = self.run(self.claim_batch(limit))
        by_id = {job.job_id: job for job in runnable}
        assert len(claimed) == min(limit, len(runnable))
        assert all(c.job_id in by_id for c in claimed), "claimed a job that is not runnable"
        unclaimed = [job.priority for job in runnable if job.job_id not in {c.job_id for c in claimed}]
        assert not unclaimed or min(by_id[c.job_id].priority for c in claimed) >= max(unclaimed)
        for c in claimed:
            job = by_id[c.job_id]
            job.state, job.attempts, job.fencing_token = R, job.attempts + 1, job.fencing_token + 1
            assert (c.attempt, c.fencing_token, c.max_attempts) == (job.attempts, job.fencing_token, job.max_attempts)

    async def claim_batch(self, limit: int) -> list[Any]:
        async with self.db.transaction() as conn:
            return await lease_store.claim_batch(
                conn, worker_id=WORKER, kinds=[KIND], limit=limit, lease_seconds=LEASE_SECONDS
            )

    @precondition(lambda self: self.jobs)
    @rule(data=st.data())
    def heartbeat(self, data: st.DataObject) -> None:
        """Extends only held leases; changes nothing else, whichever tokens it carries."""
        picked = (self.pick_job(data, R) for _ in range(data.draw(st.integers(1, 3), label="leases")))
        jobs = list({job.job_id: job for job in picked}.values())
        leases = [self.pick_lease(data, job) for job in jobs]
        held_ids = {lease.job_id for job, lease in zip(jobs, leases, strict=True) if self.holds(job, lease)}
        before = self.probe.snapshot()
        statuses = self.run(self.reports.heartbeat(leases, LEASE_SECONDS))
        after = self.probe.snapshot()
        assert _without_leases(after, held_ids) == _without_leases(before, held_ids), "it changed more than leases"
        assert all(
            a["lease_expires_at"] > b["lease_expires_at"]
            for b, a in zip(before["jobs"], after["jobs"], strict=True)
            if str(a["job_id"]) in held_ids
        )
        for job, status in zip(jobs, statuses, strict=True):
            held = job.job_id in held_ids
            assert (status.job_id, status.held, status.lease_expires_at is not None) == (job.job_id, held, held)
            assert status.cancel_requested == ((held and job.cancel_requested) or job.state is C)
            assert status.superseded == (not held and job.state is X)

    @precondition(lambda self: self.with_state(R))
    @rule(data=st.data(), batch_size=st.integers(1, 3))
    def complete(self, data: st.DataObject, batch_size: int) -> None:
        """CompleteJob for one lease; CompleteJobs for several, one statement with an outcome per item."""
        if batch_size == 1:
            self.complete_one(data)
        else:
            self.complete_many(data, batch_size)

    def complete_one(self, data: st.DataObject) -> None:
        job = self.pick_job(data, R)
        lease = self.pick_lease(data, job)
        call = self.reports.complete(WORKER, Completion(job.job_id, lease.fencing_token, b"result"))
        if not self.holds(job, lease):
            self.report_refused(call, job)
        elif job.cancel_requested:
            # Refused as the contract says, yet it is the worker's stop: the job ends CANCELLED.
            with pytest.raises(JobCancelled):
                self.run(call)
            self.move([job], C)
        else:
            assert self.run(call) is S
            self.succeed([job])

    def complete_many(self, data: st.DataObject, batch_size: int) -> None:
        jobs = list({job.job_id: job for job in (self.pick_job(data, R) for _ in range(batch_size))}.values())
        leases = [self.pick_lease(data, job) for job in jobs]
        expected = [self.completion_outcome(job, lease) for job, lease in zip(jobs, leases, strict=True)]
        completions = [Completion(lease.job_id, lease.fencing_token, b"result") for lease in leases]
        assert self.run(self.reports.complete_many(WORKER, completions)) == expected
        held = [job for job, lease in zip(jobs, leases, strict=True) if self.holds(job, lease)]
        self.move([job for job in held if job.cancel_requested], C)
        self.succeed([job for job in held if not job.cancel_requested])

    def completion_outcome(self, job: ModelJob, lease: LeaseRef) -> ReportOutcome:
        if self.holds(job, lease):
            return ReportOutcome.JOB_CANCELLED if job.cancel_requested else ReportOutcome.ACCEPTED
        refusals = {C: ReportOutcome.JOB_CANCELLED, X: ReportOutcome.JOB_SUPERSEDED}
        return refusals.get(job.state, ReportOutcome.LEASE_LOST)

    def succeed(self, jobs: list[ModelJob]) -> None:
        for job in jobs:
            job.result = (b"result", job.attempts, job.fencing_token)
        self.move(jobs, S)

    @precondition(lambda self: self.with_state(R))
    @rule(data=st.data(), category=st.sampled_from(ErrorCategory))
    def fail(self, data: st.DataObject, category: ErrorCategory) -> None:
        job = self.pick_job(data, R)
        lease = self.pick_lease(data, job)
        call = self.reports.fail(WORKER, lease, JobError(category, "boom"))
        if not self.holds(job, lease):
            self.report_refused(call, job)
            return
        expected = self.after_failure(job, category)
        outcome = self.run(call)
        assert outcome.state is expected
        job.last_category = category
        self.move([job], expected)

    @precondition(lambda self: self.with_state(R))
    @rule(data=st.data(), started=st.booleans())
    def release(self, data: st.DataObject, started: bool) -> None:
        job = self.pick_job(data, R)
        lease = self.pick_lease(data, job)
        call = self.reports.release(WORKER, lease, started=started, reason="draining")
        if not self.holds(job, lease):
            self.report_refused(call, job)
            return
        if not started:
            job.attempts -= 1
        expected = C if job.cancel_requested else F if started and job.attempts >= job.max_attempts else P
        assert self.run(call) is expected
        if expected is F:
            job.last_category = ErrorCategory.RETRYABLE
        self.move([job], expected)

    @precondition(lambda self: self.with_state(P, B, R, W, U))
    @rule(data=st.data())
    def cancel(self, data: st.DataObject) -> None:
        job = self.pick_job(data, P, B, R, W, U, one_in=4)
        call = self.lifecycle.cancel(TENANT, ACTOR, job.job_id, "changed my mind")
        if job.state in TERMINAL_STATES:
            self.refused(call, FailedPrecondition, "JOB_ALREADY_ENDED")
            return
        assert self.run(call).cancel_requested
        job.cancel_requested = True
        if job.state is not R:
            self.move([job], C)

    @precondition(lambda self: self.with_state(F, C, U, X))
    @rule(data=st.data(), accept_duplicate_risk=st.booleans())
    def retry(self, data: st.DataObject, accept_duplicate_risk: bool) -> None:
        job = self.pick_job(data, F, C, U, one_in=4)
        call = self.lifecycle.retry(TENANT, ACTOR, job.job_id, "try again", accept_duplicate_risk=accept_duplicate_risk)
        refusal = self.retry_refusal(job, accept_duplicate_risk)
        if refusal is not None:
            self.refused(call, FailedPrecondition, refusal)
            return
        expected = P if all(self.jobs[dep].state is S for dep in job.depends_on) else B
        reopened = self.run(call)
        assert reopened.state is expected
        if job.duplicate_risk:
            job.risk_accepted_attempt = job.attempts
        job.state, job.cancel_requested, job.deadline_passed = expected, False, False
        job.max_attempts = job.attempts + job.retry_budget

    def retry_refusal(self, job: ModelJob, accept_duplicate_risk: bool) -> str | None:
        if job.state not in (F, C, U):
            return "NOT_RETRYABLE"
        if job.duplicate_risk and not accept_duplicate_risk:
            return "DUPLICATE_RISK_NOT_ACCEPTED"
        if job.resource_key and (job.resource_version or 0) < self.heads[job.resource_key]:
            return "NEWER_VERSION_EXISTS"
        if any(self.jobs[dep].state in ENDED_BADLY for dep in job.depends_on):
            return "DEPENDENCY_FAILED"
        return None

    @precondition(lambda self: self.with_state(R))
    @rule(data=st.data())
    def expire(self, data: st.DataObject) -> None:
        """The worker stopped heartbeating: its lease ends in the past and the rescue sweep runs."""
        job = data.draw(st.sampled_from(self.with_state(R)))
        self.probe.execute(
            "UPDATE jobs SET lease_expires_at = clock_timestamp() - interval '1 second' WHERE job_id = %s",
            (job.job_id,),
        )
        expected = C if job.cancel_requested else self.after_failure(job, ErrorCategory.RETRYABLE)
        rescued = self.run(self.sweep(lease_store.rescue_expired_leases))
        assert [(t.job_id, t.state, t.fencing_token) for t in rescued] == [(job.job_id, expected, job.fencing_token)]
        job.last_category = ErrorCategory.RETRYABLE
        self.move([job], expected)

    @precondition(lambda self: self.with_state(P, B, R, W, U))
    @rule(data=st.data())
    def deadline_passes(self, data: st.DataObject) -> None:
        """A job's total deadline passes; the sweep fails every waiting job whose deadline passed."""
        job = data.draw(st.sampled_from(self.with_state(P, B, R, W, U)))
        self.probe.execute(
            "UPDATE jobs SET deadline = clock_timestamp() - interval '1 second' WHERE job_id = %s", (job.job_id,)
        )
        job.deadline_passed = True
        overdue = [waiting for waiting in self.with_state(P, B, W) if waiting.deadline_passed]
        failed = self.run(self.sweep(lease_store.fail_past_deadline))
        assert sorted(t.job_id for t in failed) == sorted(waiting.job_id for waiting in overdue)
        for waiting in overdue:
            waiting.last_category = ErrorCategory.PERMANENT
        self.move(overdue, F)

    async def sweep(self, step: Any) -> list[lease_store.Transition]:
        async with self.db.transaction() as conn:
            swept = await step(conn, limit=SWEEP_LIMIT)
        assert swept.rejected == [], "the database refused a sweep statement"
        return swept.moved

    @precondition(lambda self: self.jobs)
    @rule(data=st.data())
    def read(self, data: st.DataObject) -> None:
        """What a tenant reads matches the model; another tenant cannot see or touch the job."""
        job = data.draw(st.sampled_from(list(self.jobs.values())))
        assert self.run(self.queries.get_job(TENANT, job.job_id)).state is job.state
        if job.result is None:
            self.refused(self.queries.get_result(TENANT, job.job_id), FailedPrecondition)
        else:
            stored = self.run(self.queries.get_result(TENANT, job.job_id))
            assert (stored.payload, stored.attempt, stored.fencing_token) == job.result
        self.refused(self.queries.get_job(OTHER_TENANT, job.job_id), NotFound)
        self.refused(self.lifecycle.cancel(OTHER_TENANT, "tenant:tenant-b", job.job_id, ""), NotFound)
        self.refused(
            self.lifecycle.retry(OTHER_TENANT, "tenant:tenant-b", job.job_id, "", accept_duplicate_risk=True), NotFound
        )
        dependent = NewJob(kind=KIND, payload=b"x", depends_on=(job.job_id,))
        self.refused(self.submission.submit(OTHER_TENANT, "tenant:tenant-b", dependent), InvalidArgument)
        if self.heads:
            self.read_latest_result(data.draw(st.sampled_from(sorted(self.heads))))

    def read_latest_result(self, key: str) -> None:
        """Only the highest version's result is ever presented as the latest, and only once it succeeded."""
        succeeded = [
            job
            for job in self.jobs.values()
            if job.resource_key == key and job.resource_version == self.heads[key] and job.result
        ]
        call = self.queries.latest_result(TENANT, key)
        if not succeeded:
            self.refused(call, FailedPrecondition, "RESULT_NOT_READY")
            return
        job, result = self.run(call)
        # Jobs of one version are equals: any one's result is that version's (and a replica may cache it).
        assert job.job_id in {candidate.job_id for candidate in succeeded}
        assert (result.payload, result.attempt, result.fencing_token) == self.jobs[job.job_id].result

    # Invariants.

    @invariant()
    def database_agrees_with_model(self) -> None:
        rows = {
            JobId(str(r["job_id"])): r
            for r in self.probe.rows(
                "SELECT job_id, state, attempts, max_attempts, fencing_token, cancel_requested, sequence,"
                " depends_on, lease_expires_at, last_error_category FROM jobs WHERE tenant = %s",
                (TENANT,),
            )
        }
        assert set(rows) == set(self.jobs), "a job vanished or appeared unasked"
        for job_id, job in self.jobs.items():
            row = rows[job_id]
            seen = (
                JobState(row["state"]),
                row["attempts"],
                row["max_attempts"],
                row["fencing_token"],
                row["cancel_requested"],
                row["last_error_category"],
            )
            category = job.last_category.value if job.last_category else None
            expected = (job.state, job.attempts, job.max_attempts, job.fencing_token, job.cancel_requested, category)
            assert seen == expected, job
            assert (row["lease_expires_at"] is not None) == (job.state is R), "a lease outlived its running state"
            if job.state is B:
                assert any(rows[JobId(str(dep))]["state"] != S for dep in row["depends_on"])

    @invariant()
    def history_is_legal(self) -> None:
        events: dict[JobId, list[dict[str, Any]]] = defaultdict(list)
        for event in self.probe.rows(
            "SELECT job_id, sequence, from_state, to_state, attempt, fencing_token, reason"
            " FROM job_events ORDER BY job_id, sequence"
        ):
            events[JobId(str(event["job_id"]))].append(event)
        rows = {JobId(str(r["job_id"])): r for r in self.probe.rows("SELECT job_id, sequence, fencing_token FROM jobs")}
        for job_id, job in self.jobs.items():
            history = events[job_id]
            assert [e["sequence"] for e in history] == list(range(1, rows[job_id]["sequence"] + 1))
            previous: dict[str, Any] = {"to_state": None, "attempt": 0, "fencing_token": 0}
            for event in history:
                _check_step(previous, event)
                previous = event
            assert JobState(previous["to_state"]) is job.state
            assert previous["fencing_token"] == rows[job_id]["fencing_token"], "a token changed without an event"

    @invariant()
    def running_tallies_equal_the_running_jobs(self) -> None:
        # What claims under limits and shares read (job_running_tallies) against a count of the running rows
        # by the keys their claims recorded, after every step of every path a job takes.
        tallied = self.probe.rows(
            "SELECT key, sum(running)::int AS n FROM job_running_tallies GROUP BY key HAVING sum(running) <> 0"
            " ORDER BY key"
        )
        counted = self.probe.rows(
            "SELECT k.key, count(*)::int AS n FROM jobs AS j, unnest(j.running_keys) AS k(key)"
            " WHERE j.state = 'running' GROUP BY k.key ORDER BY k.key"
        )
        assert tallied == counted

    @invariant()
    def results_come_from_the_completing_lease(self) -> None:
        results = self.probe.rows(
            "SELECT r.job_id, r.payload, r.attempt, r.fencing_token, count(*) OVER (PARTITION BY r.job_id) AS copies,"
            " e.attempt AS event_attempt, e.fencing_token AS event_token"
            " FROM job_results AS r LEFT JOIN job_events AS e"
            "   ON e.job_id = r.job_id AND e.from_state = 'running' AND e.to_state = 'succeeded'"
        )
        stored = {JobId(str(r["job_id"])): r for r in results}
        assert all(r["copies"] == 1 for r in results), "more than one result, or more than one completion"
        for job_id, job in self.jobs.items():
            assert (job_id in stored) == (job.state is S), "a result exists iff the job succeeded"
            if job_id in stored:
                r = stored[job_id]
                assert (r["attempt"], r["fencing_token"]) == (r["event_attempt"], r["event_token"])
                assert (bytes(r["payload"]), r["attempt"], r["fencing_token"]) == job.result


def _check_step(previous: dict[str, Any], event: dict[str, Any]) -> None:
    """One recorded transition continues the previous one, is legal, and moves the token only on a claim."""
    before = JobState(previous["to_state"]) if previous["to_state"] else None
    frm = JobState(event["from_state"]) if event["from_state"] else None
    to = JobState(event["to_state"])
    assert frm == before, f"event {event} does not continue from {before}"
    assert (frm, to) in LEGAL_TRANSITIONS, f"illegal transition {frm} -> {to}"
    if frm in TERMINAL_STATES:
        assert event["reason"].startswith("manual retry by "), f"{frm} left by {event['reason']!r}"
    if frm is R and to is R:
        assert event["reason"].startswith("cancel requested")
    claimed = to is R and frm is not R
    assert event["fencing_token"] == previous["fencing_token"] + int(claimed), f"token jumped at {event}"
    # A release of an attempt whose handler never started gives the attempt back, even when cancelled.
    steps = {1} if claimed else {0, -1} if (frm, to) in {(R, P), (R, C)} else {0}
    assert event["attempt"] - previous["attempt"] in steps, f"attempt jumped at {event}"


def _without_leases(snapshot: dict[str, list[dict[str, Any]]], job_ids: set[JobId]) -> dict[str, list[dict[str, Any]]]:
    """The snapshot with the lease ends of these jobs left out: the one column a heartbeat may change."""
    jobs = [
        {k: v for k, v in row.items() if not (k == "lease_expires_at" and str(row["job_id"]) in job_ids)}
        for row in snapshot["jobs"]
    ]
    return {**snapshot, "jobs": jobs}


class _IgnoredRejections:
    def rejected(self, outcome: object) -> None:
        pass


def test_the_lifecycle_matches_its_model(test_databases: TestDatabases) -> None:
    # Hypothesis calls what it is given; its stub asks for the class, but a factory is how fixtures get in.
    run_state_machine_as_test(lambda: LifecycleMachine(test_databases), settings=SETTINGS)  # type: ignore[arg-type]
