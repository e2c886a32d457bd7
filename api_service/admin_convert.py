"""AdminService's proto messages to domain types and back."""

from __future__ import annotations

from api_service import convert
from jobs.v1 import admin_pb2
from shared.domain.admin import BulkOutcome, BulkRequest, JobFilter, KindStatus, Limit, LimitSpec, TenantWeight
from shared.domain.ids import TenantId
from shared.domain.jobs import Job


def limit_spec_from_proto(request: admin_pb2.SetLimitRequest) -> LimitSpec:
    return LimitSpec.requested(request.key, request.max_running, request.rate_per_second, request.burst)


def limit_to_proto(limit: Limit) -> admin_pb2.Limit:
    spec = limit.spec
    return admin_pb2.Limit(
        key=spec.key,
        max_running=spec.max_running,
        rate_per_second=spec.rate_per_second,
        burst=spec.burst,
        updated_at=convert.timestamp_to_proto(limit.updated_at),
        updated_by=limit.updated_by,
    )


def tenant_weight_to_proto(weight: TenantWeight) -> admin_pb2.TenantWeight:
    return admin_pb2.TenantWeight(
        tenant=weight.tenant,
        weight=weight.weight,
        updated_at=convert.timestamp_to_proto(weight.updated_at),
        updated_by=weight.updated_by,
    )


def kind_to_proto(status: KindStatus) -> admin_pb2.Kind:
    policy, pause = status.policy, status.pause
    return admin_pb2.Kind(
        kind=policy.kind,
        max_attempts=policy.max_attempts,
        backoff_base_seconds=policy.backoff_base_seconds,
        backoff_cap_seconds=policy.backoff_cap_seconds,
        timeout_seconds=policy.timeout_seconds or 0.0,
        external_side_effects=policy.external_side_effects,
        limit_keys=list(policy.limit_keys),
        executor=policy.executor.value,
        paused=pause is not None,
        paused_at=convert.timestamp_to_proto(pause.paused_at if pause else None),
        paused_by=pause.paused_by if pause else "",
        pause_reason=pause.reason if pause else "",
        publishers=list(status.publishers),
        policy_conflict=status.policy_conflict,
        retired_at=convert.timestamp_to_proto(status.retired_at),
    )


def job_filter_from_proto(message: admin_pb2.JobFilter, prefix: str = "filter.") -> JobFilter:
    return JobFilter(
        tenant=TenantId(message.tenant) if message.tenant else None,
        states=convert.states_from_proto(message.states, prefix),
        kind=message.kind or None,
        labels=dict(message.labels),
        resource_key=message.resource_key or None,
        error_text=message.error_text or None,
        created_after=convert.datetime_from_proto(message, "created_after", prefix),
        created_before=convert.datetime_from_proto(message, "created_before", prefix),
    )


def bulk_from_proto(request: admin_pb2.CancelJobsRequest | admin_pb2.RetryJobsRequest) -> BulkRequest:
    return BulkRequest(
        filter=job_filter_from_proto(request.filter),
        reason=request.reason,
        dry_run=request.dry_run,
        expected_count=request.expected_count,
        accept_duplicate_risk=isinstance(request, admin_pb2.RetryJobsRequest) and request.accept_duplicate_risk,
    )


def _skips(outcome: BulkOutcome) -> list[admin_pb2.BulkSkip]:
    return [
        admin_pb2.BulkSkip(job_id=s.job_id, tenant=s.tenant, reason=s.reason, message=s.message)
        for s in outcome.skipped
    ]


def cancel_jobs_to_proto(outcome: BulkOutcome) -> admin_pb2.CancelJobsResponse:
    return admin_pb2.CancelJobsResponse(
        matched_count=outcome.matched,
        changed_count=outcome.changed,
        skipped=_skips(outcome),
        skipped_count=outcome.skipped_count,
        dry_run=outcome.dry_run,
    )


def retry_jobs_to_proto(outcome: BulkOutcome) -> admin_pb2.RetryJobsResponse:
    return admin_pb2.RetryJobsResponse(
        matched_count=outcome.matched,
        changed_count=outcome.changed,
        skipped=_skips(outcome),
        skipped_count=outcome.skipped_count,
        dry_run=outcome.dry_run,
    )


def tenant_job_to_proto(job: Job) -> admin_pb2.TenantJob:
    return admin_pb2.TenantJob(tenant=job.tenant, job=convert.job_to_proto(job))
