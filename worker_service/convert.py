"""Domain types to WorkerService messages and back."""

from __future__ import annotations

from datetime import timedelta
from typing import cast

from google.protobuf import duration_pb2

from jobs.v1 import jobs_pb2, worker_pb2
from shared.domain.ids import FencingToken, JobId
from shared.domain.jobs import Completion, ErrorCategory, JobError, JobState, LeaseRef, LeaseStatus, ReportOutcome

# The generated .pyi types an enum's Value() as int but its fields as the enum class; at run time both
# are the same int, so the table says which it holds.
_CATEGORY_TO_PROTO = {
    c: cast(jobs_pb2.ErrorCategory, jobs_pb2.ErrorCategory.Value(f"ERROR_CATEGORY_{c.name}")) for c in ErrorCategory
}
_STATE_FROM_PROTO = {jobs_pb2.JobState.Value(f"JOB_STATE_{s.name}"): s for s in JobState}
_OUTCOME_FROM_PROTO = {worker_pb2.ReportOutcome.Value(f"REPORT_OUTCOME_{o.name}"): o for o in ReportOutcome}


def heartbeat_request(worker_id: str, leases: list[LeaseRef], extend_by_seconds: float) -> worker_pb2.HeartbeatRequest:
    extend_by = duration_pb2.Duration()
    extend_by.FromTimedelta(timedelta(seconds=extend_by_seconds))
    return worker_pb2.HeartbeatRequest(
        worker_id=worker_id,
        leases=[worker_pb2.Lease(job_id=lease.job_id, fencing_token=lease.fencing_token) for lease in leases],
        extend_by=extend_by,
    )


def lease_status_from_proto(message: worker_pb2.LeaseStatus) -> LeaseStatus:
    return LeaseStatus(
        job_id=JobId(message.job_id),
        fencing_token=FencingToken(message.fencing_token),
        held=message.held,
        cancel_requested=message.cancel_requested,
        superseded=message.superseded,
        resource_deleted=message.resource_deleted,
        lease_expires_at=message.lease_expires_at.ToDatetime() if message.HasField("lease_expires_at") else None,
    )


def complete_jobs_request(completions: list[Completion]) -> worker_pb2.CompleteJobsRequest:
    return worker_pb2.CompleteJobsRequest(
        completions=[
            worker_pb2.CompleteJobRequest(job_id=c.job_id, fencing_token=c.fencing_token, result=c.result)
            for c in completions
        ]
    )


def outcome_from_proto(number: int) -> ReportOutcome:
    return _OUTCOME_FROM_PROTO.get(number, ReportOutcome.LEASE_LOST)


def fail_job_request(lease: LeaseRef, error: JobError) -> worker_pb2.FailJobRequest:
    return worker_pb2.FailJobRequest(
        job_id=lease.job_id,
        fencing_token=lease.fencing_token,
        error=jobs_pb2.JobError(
            category=_CATEGORY_TO_PROTO[error.category], message=error.message, traceback=error.traceback
        ),
    )


def state_from_proto(number: int) -> JobState | None:
    return _STATE_FROM_PROTO.get(number)
